#include "architecture.hpp"

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig_resnet {

namespace {

Architecture cifar(std::int64_t depth, Shortcut shortcut) {
  if (depth < 8 || (depth - 2) % 6 != 0) {
    throw rig::UserError(fmt::format(
        "model 'resnet': depth {} does not fit style cifar: it must be 6n + 2 with n >= 1 "
        "(8, 14, 20, 32, 44, 56, 110, ...)",
        depth));
  }
  const std::int64_t n = (depth - 2) / 6;
  Architecture a;
  a.stem_width = 16;
  a.block = BlockKind::basic;
  a.shortcut = shortcut;
  a.stages = {{n, 16, 1}, {n, 32, 2}, {n, 64, 2}};
  return a;
}

Architecture imagenet(std::int64_t depth) {
  // torchvision's resnet18/34/50/101/152.
  std::vector<std::int64_t> blocks;
  BlockKind kind = BlockKind::bottleneck;
  switch (depth) {
    case 18:
      blocks = {2, 2, 2, 2}, kind = BlockKind::basic;
      break;
    case 34:
      blocks = {3, 4, 6, 3}, kind = BlockKind::basic;
      break;
    case 50:
      blocks = {3, 4, 6, 3};
      break;
    case 101:
      blocks = {3, 4, 23, 3};
      break;
    case 152:
      blocks = {3, 8, 36, 3};
      break;
    default:
      throw rig::UserError(fmt::format(
          "model 'resnet': depth {} does not fit style imagenet: expected 18, 34, 50, 101 or 152",
          depth));
  }
  Architecture a;
  a.imagenet_stem = true;
  a.stem_width = 64;
  a.block = kind;
  a.shortcut = Shortcut::projection;
  const std::int64_t widths[] = {64, 128, 256, 512};
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    a.stages.push_back({blocks[i], widths[i], i == 0 ? 1 : 2});
  }
  return a;
}

// The stem, block kind and stages that (style, depth, shortcut) name.
Architecture shaped(const std::string& style, std::int64_t depth, const std::string& shortcut) {
  if (style == "cifar")
    return cifar(depth, shortcut == "A" ? Shortcut::zero_pad : Shortcut::projection);
  if (style == "imagenet") {
    if (shortcut != "B") {
      throw rig::UserError(fmt::format(
          "model 'resnet': shortcut {} is only for style cifar; style imagenet uses projection "
          "shortcuts (B)",
          shortcut));
    }
    return imagenet(depth);
  }
  throw rig::UserError(
      fmt::format("model 'resnet': style '{}' is not known: expected cifar or imagenet", style));
}

}  // namespace

Architecture architecture(const std::string& style, std::int64_t depth, const std::string& shortcut,
                          bool channels_last) {
  Architecture a = shaped(style, depth, shortcut);
  a.channels_last = channels_last;
  return a;
}

}  // namespace rig_resnet

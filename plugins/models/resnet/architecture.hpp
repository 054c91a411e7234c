// Which ResNet a (style, depth, shortcut) names: the stem, the block kind and
// the stages. Pure data; blocks.hpp builds the layers from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rig_resnet {

enum class BlockKind { basic, bottleneck };
enum class Shortcut { projection, zero_pad };  // option B / option A of He et al. 2016

struct Stage {
  std::int64_t blocks = 0;
  std::int64_t width = 0;   // channels inside the block; the output is width x expansion
  std::int64_t stride = 1;  // of the stage's first block
};

struct Architecture {
  bool imagenet_stem = false;  // 7x7/2 conv + 3x3/2 max pool; else a 3x3/1 conv
  std::int64_t stem_width = 0;
  BlockKind block = BlockKind::basic;
  Shortcut shortcut = Shortcut::projection;
  std::vector<Stage> stages;
  // Activations [N, H, W, C] (NHWC) instead of [N, C, H, W]: the layout of
  // cuDNN's 16-bit tensor-core convolutions. The parameters are the same.
  bool channels_last = false;

  std::int64_t expansion() const { return block == BlockKind::bottleneck ? 4 : 1; }
  std::int64_t features() const { return stages.back().width * expansion(); }  // fc input
};

// Throws rig::UserError naming the parameter when the combination does not exist.
Architecture architecture(const std::string& style, std::int64_t depth, const std::string& shortcut,
                          bool channels_last = false);

}  // namespace rig_resnet

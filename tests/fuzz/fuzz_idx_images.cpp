// idx_images' IDX reader: gzip (zlib) or plain files, the magic number, the
// dimensions against the payload, the labels. Input: the image file, then a
// line "#%labels" and the label file; without it the input is tried as both.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "plugin_source.hpp"
// Its reader lives in the plugin's anonymous namespace.
#include "../../plugins/data/idx_images/idx_images.cpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = rig_fuzz::split(rig_fuzz::as_text(data, size), "\n#%labels\n");
  const std::string images = rig_fuzz::write_file("images.idx", parts[0]);
  const std::string labels =
      rig_fuzz::write_file("labels.idx", parts.size() > 1 ? parts[1] : parts[0]);
  try {
    const rig_data::ImageSet set = load({"train_images", images}, {"train_labels", labels},
                                        /*num_classes=*/10, /*limit=*/3);
    if (set.pixels.size() != static_cast<std::size_t>(set.size() * set.image_size())) std::abort();
  } catch (const rig::UserError&) {
  }
  return 0;
}

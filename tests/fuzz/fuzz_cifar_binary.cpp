// cifar_binary's record reader, as CIFAR-10 (label, 3072 pixels) and as
// CIFAR-100 (coarse and fine label, 3072 pixels). Input: one batch file.
#include <cstddef>
#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

#include "fuzz_util.hpp"
#include "plugin_source.hpp"
// Its reader lives in the plugin's anonymous namespace.
#include "../../plugins/data/cifar_binary/cifar_binary.cpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = rig_fuzz::write_file("data_batch.bin", rig_fuzz::as_text(data, size));
  for (const char* dataset : {"cifar10", "cifar100"}) {
    YAML::Node params;
    params["dataset"] = dataset;
    params["label"] = "fine";
    const Format format = format_of(params);
    for (const std::int64_t wanted : {std::int64_t{2}, std::numeric_limits<std::int64_t>::max()}) {
      rig_data::ImageSet set;
      set.channels = kChannels;
      set.height = kSide;
      set.width = kSide;
      try {
        read_records(format, "train_files", path, wanted, set);
        if (set.pixels.size() != static_cast<std::size_t>(set.size() * set.image_size())) {
          std::abort();
        }
      } catch (const rig::UserError&) {
      }
    }
  }
  return 0;
}

#include "rig/error.hpp"

#include <utility>

namespace rig {

namespace {

std::string out_of_memory_message(const std::string& device, const std::string& facts,
                                  const std::string& where, const std::string& advice) {
  std::string text = "out of memory on " + device;
  if (!where.empty()) text += " in " + where;
  text += ": " + facts;
  if (!advice.empty()) text += " " + advice;
  return text;
}

}  // namespace

OutOfMemoryError::OutOfMemoryError(std::string device, std::string facts, std::string where,
                                   std::string advice)
    : UserError(out_of_memory_message(device, facts, where, advice)),
      device_(std::move(device)),
      facts_(std::move(facts)),
      where_(std::move(where)),
      advice_(std::move(advice)) {}

OutOfMemoryError OutOfMemoryError::within(const std::string& where,
                                          const std::string& advice) const {
  std::string joined = advice_;
  if (!advice.empty()) joined += joined.empty() ? advice : " " + advice;
  return {device_, facts_, where_.empty() ? where : where_, joined};
}

}  // namespace rig

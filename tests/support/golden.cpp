#include "golden.hpp"

#include <cmath>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace rig_test {
namespace {

rig::Tensor tensor_from_json(const nlohmann::json& j) {
  const rig::Shape shape = j.at("shape").get<rig::Shape>();
  const std::string dtype = j.at("dtype").get<std::string>();
  if (dtype == "f32")
    return rig::Tensor::from_vector(j.at("data").get<std::vector<float>>(), shape);
  if (dtype == "u8") {
    return rig::Tensor::from_vector(j.at("data").get<std::vector<std::uint8_t>>(), shape);
  }
  rig::Tensor t = rig::Tensor::from_vector(j.at("data").get<std::vector<std::int64_t>>(), shape);
  return dtype == "i32" ? t.to(rig::DType::i32) : t;
}

std::map<std::string, rig::Tensor> tensors_from_json(const nlohmann::json& j) {
  std::map<std::string, rig::Tensor> out;
  for (const auto& [key, value] : j.items()) out.emplace(key, tensor_from_json(value));
  return out;
}

const rig::Tensor& lookup(const std::map<std::string, rig::Tensor>& map, const std::string& key,
                          const std::string& what, const std::string& name) {
  auto it = map.find(key);
  if (it == map.end()) {
    throw std::out_of_range(fmt::format("golden case '{}' has no {} '{}'", name, what, key));
  }
  return it->second;
}

}  // namespace

const rig::Tensor& GoldenCase::input(const std::string& key) const {
  return lookup(inputs, key, "input", name);
}
const rig::Tensor& GoldenCase::output(const std::string& key) const {
  return lookup(outputs, key, "output", name);
}
const rig::Tensor& GoldenCase::grad(const std::string& key) const {
  return lookup(grads, key, "grad", name);
}

std::vector<GoldenCase> load_golden(const std::string& area) {
  const std::string path = std::string(RIG_SOURCE_DIR) + "/tests/golden/" + area + ".json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("golden file " + path + " not found");
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : doc.at("cases")) {
    GoldenCase g;
    g.name = c.at("name").get<std::string>();
    g.inputs = tensors_from_json(c.at("inputs"));
    g.outputs = tensors_from_json(c.at("outputs"));
    g.grads = tensors_from_json(c.at("grads"));
    g.params = c.at("params");
    cases.push_back(std::move(g));
  }
  return cases;
}

GoldenCase golden_case(const std::string& area, const std::string& name) {
  for (auto& c : load_golden(area)) {
    if (c.name == name) return c;
  }
  throw std::out_of_range(fmt::format("golden file {}.json has no case '{}'", area, name));
}

::testing::AssertionResult tensors_close(const rig::Tensor& actual, const rig::Tensor& expected,
                                         double rtol, double atol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << rig::to_string(actual.shape())
                                         << " != expected " << rig::to_string(expected.shape());
  }
  const std::vector<float> a = actual.to_vector();
  const std::vector<float> e = expected.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - e[i]);
    if (!(diff <= atol + rtol * std::fabs(static_cast<double>(e[i])))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a[i] << " vs expected " << e[i] << " (|diff| " << diff
             << ", rtol " << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace rig_test

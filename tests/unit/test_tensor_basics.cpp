// Tensor construction, views, dtype checks, and the small name helpers.
#include <gtest/gtest.h>

#include "rig/batch.hpp"
#include "rig/context.hpp"
#include "rig/plugin.hpp"
#include "rig/tensor.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::DType;
using rig::Shape;
using rig::Tensor;
using rig_test::contains;
using rig_test::error_of;

TEST(TensorBasics, DtypesAndShapes) {
  EXPECT_EQ(rig::dtype_size(DType::f32), 4U);
  EXPECT_EQ(rig::dtype_size(DType::bf16), 2U);
  EXPECT_EQ(rig::dtype_size(DType::i64), 8U);
  EXPECT_EQ(rig::dtype_size(DType::u8), 1U);
  EXPECT_EQ(rig::dtype_name(DType::f16), "f16");
  EXPECT_EQ(rig::to_string(Shape{32, 64}), "[32,64]");
  EXPECT_EQ(rig::to_string(Shape{}), "[]");
  EXPECT_EQ(rig::shape_numel({}), 1);
  EXPECT_EQ(rig::shape_numel({2, 0, 3}), 0);
  EXPECT_EQ(rig::to_string(rig::Device::cpu()), "cpu");
  EXPECT_EQ(rig::to_string(rig::Device{rig::Device::Type::cuda, 1}), "cuda:1");
  EXPECT_THROW(rig::shape_numel({2, -1}), std::invalid_argument);
}

TEST(TensorBasics, FactoriesAndAccess) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.size(-1), 3);
  EXPECT_EQ(z.nbytes(), 24U);
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0F);
  EXPECT_EQ(Tensor::full({3}, 2.5F).to_vector(), (std::vector<float>{2.5F, 2.5F, 2.5F}));
  EXPECT_FLOAT_EQ(Tensor::scalar(4.0F).item(), 4.0F);
  Tensor l = Tensor::from_vector(std::vector<std::int64_t>{7, 8}, {2});
  EXPECT_EQ(l.dtype(), DType::i64);
  EXPECT_EQ(l.data<std::int64_t>()[1], 8);
  EXPECT_TRUE(contains(error_of([&] { l.data<float>(); }), "data<f32>() on a i64 tensor"));
  EXPECT_TRUE(contains(error_of([&] { z.item(); }), "shape [2,3], not one element"));
  EXPECT_TRUE(contains(error_of([&] { z.size(2); }), "axis 2 is out of range for shape [2,3]"));
  EXPECT_TRUE(contains(error_of([] {
                         Tensor::from_vector(std::vector<float>{1, 2}, {3});
                       }),
                       "2 values for shape [3]"));
  if (!rig::cuda_emulator_requested()) {  // else cuda:0 is the emulator (see test_tensor_views)
    EXPECT_THROW(Tensor::empty({2}, DType::f32, rig::Device{rig::Device::Type::cuda, 0}),
                 std::invalid_argument);
  }
  EXPECT_THROW(Tensor().shape(), std::logic_error);
}

TEST(TensorBasics, ViewsShareStorage) {
  Tensor flat = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {6});
  Tensor view = Tensor::view_of(flat.impl()->storage, 2, {2, 2}, DType::f32);
  EXPECT_EQ(view.offset(), 2);
  EXPECT_EQ(view.strides(), (rig::Strides{2, 1}));
  EXPECT_EQ(view.to_vector(), (std::vector<float>{2, 3, 4, 5}));
  view.fill_(9.0F);
  EXPECT_EQ(flat.to_vector(), (std::vector<float>{0, 1, 9, 9, 9, 9}));
  EXPECT_TRUE(contains(error_of([&] { Tensor::view_of(flat.impl()->storage, 3, {4}, DType::f32); }),
                       "f32 [4] at element 3 does not fit in a storage of 24 bytes"));

  Tensor r = flat.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  r.data<float>()[0] = -1.0F;
  EXPECT_EQ(flat.to_vector()[0], -1.0F);
  EXPECT_TRUE(contains(error_of([&] { flat.reshape({4, -1}); }), "[6] (6 elements) to [4,-1]"));
  EXPECT_THROW(flat.reshape({7}), std::invalid_argument);

  Tensor c = flat.clone();
  c.fill_(0.0F);
  EXPECT_EQ(flat.to_vector()[1], 1.0F);
  c.copy_from(flat);
  EXPECT_EQ(c.to_vector(), flat.to_vector());
  EXPECT_THROW(c.copy_from(Tensor::zeros({5})), std::invalid_argument);
}

TEST(TensorBasics, RequiresGradAndDetach) {
  Tensor t = Tensor::zeros({2});
  EXPECT_FALSE(t.requires_grad());
  t.set_requires_grad(true);
  EXPECT_TRUE(t.requires_grad());
  EXPECT_FALSE(t.grad().defined());
  Tensor d = t.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.impl()->storage, t.impl()->storage);
  EXPECT_THROW(Tensor::zeros({1}, DType::i64).set_requires_grad(true), std::invalid_argument);
  EXPECT_NO_THROW(Tensor::zeros({1}, DType::bf16).set_requires_grad(true));
  EXPECT_THROW(t.set_grad(Tensor::zeros({3})), std::invalid_argument);
}

TEST(TensorBasics, NamesOfKindsAndModes) {
  for (auto kind : rig::kAllPluginKinds) {
    EXPECT_EQ(rig::parse_plugin_kind(rig::to_string(kind)), kind);
  }
  EXPECT_EQ(rig::to_string(rig::PluginKind::data_layer), "data_layer");
  EXPECT_EQ(rig::parse_plugin_kind("lr_policy"), rig::PluginKind::lr_policy);
  EXPECT_FALSE(rig::parse_plugin_kind("datalayer").has_value());
  EXPECT_EQ(rig::to_string(rig::Mode::train), "train");
  EXPECT_EQ(rig::to_string(rig::Mode::eval), "eval");
  EXPECT_EQ(rig::to_string(rig::Mode::infer), "infer");
}

TEST(TensorBasics, BatchAtNamesTheTensorsItHas) {
  rig::Batch batch;
  batch.tensors["features"] = Tensor::zeros({2, 3});
  batch.tensors["labels"] = Tensor::zeros({2});
  EXPECT_EQ(batch.at("features").shape(), (Shape{2, 3}));
  EXPECT_EQ(error_of([&] { batch.at("targets"); }),
            "the batch has no tensor 'targets'; it has: features, labels");
}

}  // namespace

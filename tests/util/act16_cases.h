// The ops of core/ops.h on 16-bit activations (core/precision.h's activation_dtype): one case per
// op or forward/backward pair, shared by the CPU test (tests/core/test_activations16.cc: dtypes
// of every output and values equal to the f32 op's on the widened inputs, rounded once) and the
// CUDA one (tests/cuda/test_cuda_ops.cc: the device against the CPU on the same 16-bit inputs).
// Each input is an activation (rounded to the 16-bit type under test), an f32 parameter or
// statistic, or integer ids; each output is expected in the activation type or f32.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/random.h"
#include "core/tensor.h"

namespace ada::testing {

enum class Kind { act, f32, ids };

struct Act16Case {
  std::string name;
  std::vector<std::pair<Kind, Shape>> inputs;  // ids: values in [0, shape's last dim's bound)
  std::vector<Kind> outputs;                   // act or f32, one per output of `run`
  std::function<std::vector<Tensor>(const std::vector<Tensor>& in, DType act)> run;
  int64_t id_bound = 8;     // ids are drawn in [0, id_bound)
  bool products16 = false;  // multiplies 16-bit operands: on CUDA under the matching precision
};

// Inputs for a case on the CPU: N(0,1) values, activations rounded to `act`.
inline std::vector<Tensor> act16_inputs(const Act16Case& c, DType act, uint64_t seed) {
  Generator g(seed);
  std::vector<Tensor> in;
  for (const auto& [kind, shape] : c.inputs) {
    if (kind == Kind::ids) {
      Tensor ids = Tensor::empty(shape, DType::i64);
      Tensor u = Tensor::uniform(shape, g, 0.f, static_cast<float>(c.id_bound));
      for (int64_t i = 0; i < ids.numel(); ++i)
        ids.data<int64_t>()[i] = static_cast<int64_t>(u.data<float>()[i]) % c.id_bound;
      in.push_back(ids);
      continue;
    }
    Tensor x = Tensor::randn(shape, g);
    in.push_back(kind == Kind::act ? ops::to_dtype(x, act) : x);
  }
  return in;
}

// A forward output as the backward reads it: stored in `act` (the reference run, on f32 inputs,
// rounds it the same way; in the 16-bit run it already is).
inline Tensor as_stored(const Tensor& y, DType act) {
  return ops::to_dtype(ops::to_dtype(y, act), y.dtype());
}

inline std::vector<Act16Case> act16_cases() {
  using K = Kind;
  const Shape x{6, 40}, row{40};
  std::vector<Act16Case> c;
  auto unary = [&](const char* name, Tensor (*f)(const Tensor&)) {
    c.push_back({name, {{K::act, x}}, {K::act}, [f](const std::vector<Tensor>& in, DType) {
                   return std::vector<Tensor>{f(in[0])};
                 }});
  };
  auto binary = [&](const char* name, Tensor (*f)(const Tensor&, const Tensor&)) {
    c.push_back(
        {name, {{K::act, x}, {K::act, x}}, {K::act}, [f](const std::vector<Tensor>& in, DType) {
           return std::vector<Tensor>{f(in[0], in[1])};
         }});
  };
  binary("add", ops::add);
  binary("sub", ops::sub);
  binary("mul", ops::mul);
  binary("add_relu", ops::add_relu);
  binary("relu_backward", ops::relu_backward);
  binary("gelu_backward", ops::gelu_backward);
  binary("tanh_backward", ops::tanh_backward);
  binary("softmax_backward", ops::softmax_backward);
  unary("relu", ops::relu);
  unary("gelu", ops::gelu);
  unary("tanh", ops::tanh);
  unary("softmax", ops::softmax);
  unary("log_softmax", ops::log_softmax);
  c.push_back({"scale", {{K::act, x}}, {K::act}, [](const std::vector<Tensor>& in, DType) {
                 return std::vector<Tensor>{ops::scale(in[0], -0.75f)};
               }});
  c.push_back({"add_bias + bias_grad",
               {{K::act, x}, {K::f32, row}},
               {K::act, K::f32},
               [](const std::vector<Tensor>& in, DType) {
                 return std::vector<Tensor>{ops::add_bias(in[0], in[1]), ops::bias_grad(in[0])};
               }});
  c.push_back(
      {"permute", {{K::act, {3, 4, 5}}}, {K::act}, [](const std::vector<Tensor>& in, DType) {
         return std::vector<Tensor>{ops::permute(in[0], {2, 0, 1})};
       }});
  // Attention's head split (on the GPU 16 bytes a thread: runs of 16 contiguous 16-bit values).
  c.push_back({"permute heads",
               {{K::act, {2, 3, 5, 16}}},
               {K::act},
               [](const std::vector<Tensor>& in, DType) {
                 return std::vector<Tensor>{ops::permute(in[0], {0, 2, 1, 3})};
               }});
  c.push_back({"sum over rows", {{K::act, x}}, {K::act}, [](const std::vector<Tensor>& in, DType) {
                 return std::vector<Tensor>{ops::sum(in[0], {0})};
               }});
  // Rows of 40 and 1,024 (on the GPU a warp a row, 16 bytes a load) and of 12 (not a whole
  // number of 8-value vectors: a block a row).
  for (const Shape& ln : {x, Shape{3, 1024}, Shape{5, 12}})
    c.push_back({"layer_norm " + shape_str(ln),
                 {{K::act, ln}, {K::f32, {ln[1]}}, {K::f32, {ln[1]}}, {K::act, ln}},
                 {K::act, K::f32, K::f32, K::act, K::f32, K::f32},
                 [](const std::vector<Tensor>& in, DType) {
                   Tensor mean, rstd;
                   Tensor y = ops::layer_norm_forward(in[0], in[1], in[2], 1e-5f, mean, rstd);
                   ops::LayerNormGrads g =
                       ops::layer_norm_backward(in[3], in[0], in[1], mean, rstd);
                   return std::vector<Tensor>{y, mean, rstd, g.dx, g.dgamma, g.dbeta};
                 }});
  // Keys 7 (a block a row on the GPU) and 64 (a warp a row, 16 bytes a load).
  for (int64_t keys : {7, 64})
    c.push_back({"attention_softmax keys " + std::to_string(keys),
                 {{K::act, {4, 5, keys}}, {K::f32, {2, keys}}, {K::act, {4, 5, keys}}},
                 {K::act, K::act},
                 [](const std::vector<Tensor>& in, DType act) {
                   Tensor y = ops::attention_softmax(in[0], in[1], 2, 0.35f);
                   return std::vector<Tensor>{
                       y, ops::attention_softmax_backward(in[2], as_stored(y, act), 0.35f)};
                 }});
  c.push_back({"dropout_apply", {{K::act, x}}, {K::act}, [](const std::vector<Tensor>& in, DType) {
                 return std::vector<Tensor>{ops::dropout_apply(in[0], 0.3f, 11, 5)};
               }});
  // The weight enters as the 16-bit operand a product takes (ops::matmul_operand's copy).
  c.push_back({"matmul",
               {{K::act, {9, 33}}, {K::act, {7, 33}}, {K::act, {9, 7}}},
               {K::act, K::act, K::f32},
               [](const std::vector<Tensor>& in, DType act) {
                 return std::vector<Tensor>{ops::matmul(in[0], in[1], false, true, act),
                                            ops::matmul(in[2], in[1], false, false, act),
                                            ops::matmul(in[2], in[0], true, false, DType::f32)};
               },
               8,
               true});
  c.push_back({"bmm",
               {{K::act, {3, 5, 16}}, {K::act, {3, 6, 16}}},
               {K::act},
               [](const std::vector<Tensor>& in, DType act) {
                 return std::vector<Tensor>{ops::bmm(in[0], in[1], false, true, act)};
               },
               8,
               true});
  c.push_back({"embedding",
               {{K::f32, {8, 12}}, {K::ids, {3, 4}}, {K::act, {3, 4, 12}}},
               {K::act, K::f32},
               [](const std::vector<Tensor>& in, DType act) {
                 Tensor dw = Tensor::zeros({8, 12}, DType::f32, in[0].device());
                 ops::embedding_backward(in[2], in[1], dw);
                 return std::vector<Tensor>{ops::embedding_forward(in[0], in[1], act), dw};
               }});
  c.push_back({"cross_entropy",
               {{K::act, {6, 8}}, {K::ids, {6}}},
               {K::f32, K::f32, K::act},
               [](const std::vector<Tensor>& in, DType act) {
                 Tensor logp;
                 Tensor loss = ops::cross_entropy_forward(in[0], in[1], 0.1f, -100, logp);
                 return std::vector<Tensor>{
                     loss, logp, ops::cross_entropy_backward(1.f, logp, in[1], 0.1f, -100, act)};
               }});
  c.push_back({"conv2d",
               {{K::act, {2, 3, 7, 7}}, {K::f32, {4, 3, 3, 3}}, {K::act, {2, 4, 7, 7}}},
               {K::act, K::act, K::f32},
               [](const std::vector<Tensor>& in, DType act) {
                 ops::Conv2dParams p;
                 p.pad_h = p.pad_w = 1;
                 return std::vector<Tensor>{
                     ops::conv2d_forward(in[0], in[1], p, act),
                     ops::conv2d_backward_data(in[2], in[1], in[0].shape(), p),
                     ops::conv2d_backward_filter(in[2], in[0], in[1].shape(), p)};
               }});
  // batch_norm_relu, and a residual block's tail: relu(batch_norm + residual) in one pass
  // (16-bit: the normalised value not rounded before the add, so not add_relu's bits after
  // batch_norm: a case of its own). NCHW, and [rows, C] (channels-last's view, which the GPU runs
  // on kernels of its own: lanes on channels, C past a warp's 32, several chunks of rows). The
  // GPU's element-wise passes take 8 16-bit values a step within one channel (planes of 32) or
  // across 8 channels of a row (C 40, 64, 256), else one (planes of 25, C 12); its channels-last
  // statistics 8 channels a lane when C / 8 is 32 or more or divides 32 (C 8, 16, 32: 32, 16
  // and 8 rows a warp; C 64: 4; C 256; C 264: 33 groups, a second column block with one lane's
  // group), else one (C 40, 12).
  for (const Shape& x :
       {Shape{4, 3, 5, 5}, Shape{2, 3, 4, 8}, Shape{1000, 40}, Shape{300, 12}, Shape{500, 64},
        Shape{64, 256}, Shape{700, 8}, Shape{400, 16}, Shape{300, 32}, Shape{100, 264}})
    for (bool residual : {false, true}) {
      const int64_t ch = x[1];
      std::vector<std::pair<Kind, Shape>> args{
          {K::act, x}, {K::f32, {ch}}, {K::f32, {ch}}, {K::act, x}};
      if (residual) args.push_back({K::act, x});
      std::string name = residual ? "batch_norm_relu + residual" : "batch_norm_relu";
      name += (x.size() == 2 ? " [rows, C] " : " ") + shape_str(x);
      c.push_back({name,
                   args,
                   {K::act, K::act, K::f32, K::f32},
                   [ch](const std::vector<Tensor>& in, DType act) {
                     Tensor rm = Tensor::zeros({ch}, DType::f32, in[0].device());
                     Tensor rv = Tensor::ones({ch}, DType::f32, in[0].device());
                     Tensor mean, invstd;
                     Tensor y =
                         ops::batch_norm_relu_train(in[0], in[1], in[2], rm, rv, 0.1f, 1e-5f, mean,
                                                    invstd, in.size() > 4 ? in[4] : Tensor());
                     ops::BatchNormGrads g = ops::batch_norm_relu_backward(
                         in[3], as_stored(y, act), in[0], in[1], mean, invstd);
                     return std::vector<Tensor>{y, g.dx, g.dgamma, g.dbeta};
                   }});
    }
  c.push_back(
      {"batch_norm + eval",
       {{K::act, {4, 3, 5, 5}}, {K::f32, {3}}, {K::f32, {3}}, {K::act, {4, 3, 5, 5}}},
       {K::act, K::act, K::f32, K::f32, K::act, K::act, K::f32, K::f32},
       [](const std::vector<Tensor>& in, DType) {
         Tensor rm = Tensor::zeros({3}, DType::f32, in[0].device());
         Tensor rv = Tensor::ones({3}, DType::f32, in[0].device());
         Tensor mean, invstd;
         Tensor y = ops::batch_norm_train(in[0], in[1], in[2], rm, rv, 0.1f, 1e-5f, mean, invstd);
         ops::BatchNormGrads g = ops::batch_norm_backward(in[3], in[0], in[1], mean, invstd);
         Tensor ye = ops::batch_norm_eval(in[0], in[1], in[2], rm, rv, 1e-5f);
         ops::BatchNormGrads ge = ops::batch_norm_eval_backward(in[3], in[0], in[1], rm, rv, 1e-5f);
         return std::vector<Tensor>{y, g.dx, g.dgamma, g.dbeta, ye, ge.dx, ge.dgamma, ge.dbeta};
       }});
  c.push_back({"max_pool2d + global_avg_pool",
               {{K::act, {2, 3, 6, 6}}, {K::act, {2, 3, 3, 3}}},
               {K::act, K::act, K::act},
               [](const std::vector<Tensor>& in, DType) {
                 Tensor idx;
                 Tensor y = ops::max_pool2d_forward(in[0], ops::Pool2dParams{}, idx);
                 return std::vector<Tensor>{y, ops::max_pool2d_backward(in[1], idx, in[0].shape()),
                                            ops::global_avg_pool_forward(in[0])};
               }});
  // Channels-last max-pool (the ResNet stem's 3x3 stride 2 with padding: overlapping windows).
  c.push_back(
      {"max_pool2d nhwc",
       {{K::act, {2, 7, 7, 16}}, {K::act, {2, 4, 4, 16}}},
       {K::act, K::act},
       [](const std::vector<Tensor>& in, DType) {
         Tensor idx;
         Tensor y = ops::max_pool2d_nhwc_forward(in[0], {3, 3, 2, 2, 1, 1, true}, idx);
         return std::vector<Tensor>{y, ops::max_pool2d_nhwc_backward(in[1], idx, in[0].shape())};
       }});
  c.push_back({"avg_pool2d + global_avg_pool_backward",
               {{K::act, {2, 3, 7, 7}}, {K::act, {2, 3, 4, 4}}, {K::act, {2, 3}}},
               {K::act, K::act, K::act},
               [](const std::vector<Tensor>& in, DType) {
                 ops::Pool2dParams p;
                 p.kernel_h = p.kernel_w = 3;
                 p.stride_h = p.stride_w = 2;
                 p.pad_h = p.pad_w = 1;
                 return std::vector<Tensor>{ops::avg_pool2d_forward(in[0], p),
                                            ops::avg_pool2d_backward(in[1], in[0].shape(), p),
                                            ops::global_avg_pool_backward(in[2], in[0].shape())};
               }});
  c.push_back({"fused_attention",
               {{K::act, {2, 9, 64}},
                {K::act, {2, 9, 64}},
                {K::act, {2, 9, 64}},
                {K::f32, {2, 9}},
                {K::act, {2, 9, 64}}},
               {K::act, K::f32, K::act, K::act, K::act},
               [](const std::vector<Tensor>& in, DType act) {
                 ops::AttentionArgs a;
                 a.heads = 2;
                 a.scale = 0.125f;
                 a.dropout = 0.2f;
                 a.seed = 3;
                 a.first = 17;
                 Tensor lse;
                 Tensor out = ops::fused_attention(in[0], in[1], in[2], in[3], a, lse);
                 ops::AttentionGrads g = ops::fused_attention_backward(
                     in[4], in[0], in[1], in[2], as_stored(out, act), lse, in[3], a);
                 return std::vector<Tensor>{out, lse, g.dq, g.dk, g.dv};
               }});
  return c;
}

}  // namespace ada::testing

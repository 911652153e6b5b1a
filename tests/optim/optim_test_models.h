// Small networks shared by the optimizer tests: Net, parameters at layers.{0,1}.{kernel,bias},
// float64, each with its own metadata (out_sharding, optimizer_sharding); Three, three
// parameters of a dtype on a device (the fused passes).
#pragma once

#include <nnx/nnx.h>

#include <torch/types.h>

#include <vector>

namespace nnx_test {

struct Layer : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  nnx::Param NNX_FIELD(bias);
  Layer(int64_t in, int64_t out, nnx::Rngs& rngs, nnx::Metadata kernel_md, nnx::Metadata bias_md)
      : kernel(nnx::initializers::lecun_normal()(rngs.params(), {in, out}, torch::kDouble),
               std::move(kernel_md)),
        bias(nnx::initializers::normal(0.1)(rngs.params(), {out}, torch::kDouble),
             std::move(bias_md)) {}
};

// 8 -> 16 -> 4. `md`: metadata of layers.0.kernel, layers.0.bias, layers.1.kernel,
// layers.1.bias (fewer entries: none for the rest).
struct Net : nnx::Module {
  std::vector<Layer> NNX_FIELD(layers);
  explicit Net(nnx::Rngs& rngs, std::vector<nnx::Metadata> md = {}) {
    md.resize(4);
    layers.emplace_back(8, 16, rngs, md[0], md[1]);
    layers.emplace_back(16, 4, rngs, md[2], md[3]);
  }
  nnx::Array operator()(const nnx::Array& x) const {
    auto h = nnx::relu(nnx::linear(x, layers[0].kernel.value(), layers[0].bias.value()));
    return nnx::linear(h, layers[1].kernel.value(), layers[1].bias.value());
  }
};

inline const std::vector<std::string>& net_paths() {
  static const std::vector<std::string> paths{"layers.0.kernel", "layers.0.bias",
                                              "layers.1.kernel", "layers.1.bias"};
  return paths;
}

// A Net whose variables are placed on `mesh` by their metadata (null: on no mesh).
inline Net make_net(const std::shared_ptr<const nnx::Mesh>& mesh,
                    std::vector<nnx::Metadata> md = {}) {
  nnx::Rngs rngs(0);
  if (!mesh) return Net(rngs, std::move(md));
  nnx::MeshContext on(mesh);
  return Net(rngs, std::move(md));
}

// Three random parameters (a matrix, a vector, a 3-d block) of `dtype` on `device`.
struct Three : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  nnx::Param NNX_FIELD(bias);
  nnx::Param NNX_FIELD(scale);
  explicit Three(at::ScalarType dtype, c10::Device device = torch::kCPU)
      : kernel(torch::randn({300, 70}, torch::TensorOptions(dtype)).to(device)),
        bias(torch::randn({70}, torch::TensorOptions(dtype)).to(device)),
        scale(torch::randn({3, 5, 2}, torch::TensorOptions(dtype)).to(device)) {}
};

}  // namespace nnx_test

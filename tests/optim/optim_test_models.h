// A small network shared by the optimizer tests: parameters at layers.{0,1}.{kernel,bias},
// float64, each with its own metadata (out_sharding, optimizer_sharding).
#pragma once

#include <nnx/nnx.h>

#include <torch/torch.h>

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

}  // namespace nnx_test

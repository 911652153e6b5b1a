// Checkpoint test helpers: a directory every rank shares (named by rank 0, removed at scope
// exit), a small model with every kind of state, and bitwise comparison of whole values.
#pragma once

#include <nnx/nnx.h>

#include "format_test_util.h"

#include "../catch_after_torch.h"
#include <torch/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace nnx_test {

class SharedDir {
 public:
  SharedDir() {
    static std::atomic<int> counter{0};
    auto id = torch::full({2}, static_cast<int64_t>(::getpid()), torch::kLong);
    id[1] = counter++;
    nnx::Communicator::world().broadcast_(id, 0);
    path_ = (std::filesystem::temp_directory_path() /
             fmt::format("nnx_ckpt_{}_{}", id[0].item<int64_t>(), id[1].item<int64_t>()))
                .string();
    if (nnx::world_rank() == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    nnx::Communicator::world().barrier();
  }
  ~SharedDir() {
    nnx::Communicator::world().barrier();
    std::error_code ignored;
    if (nnx::world_rank() == 0) std::filesystem::remove_all(path_, ignored);
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

using nnx_format_test::read_bytes;
using nnx_format_test::write_bytes;

// Params with logical names, LayerNorm scale/bias, a Dropout's RNG stream (key and count).
struct CkptNet : nnx::Module {
  CkptNet(nnx::Rngs& rngs)
      : norm(8, rngs),
        up(8, 16, rngs, {.kernel_metadata = {.out_sharding = nnx::P("embed", "mlp")},
                         .bias_metadata = {.out_sharding = nnx::P("mlp")}}),
        down(16, 8, rngs, {.kernel_metadata = {.out_sharding = nnx::P("mlp", "embed")}}),
        dropout(0.25, rngs) {}
  nnx::Array operator()(const nnx::Array& x) {
    return down(dropout(nnx::relu(up(norm(x)))));
  }
  nnx::LayerNorm NNX_FIELD(norm);
  nnx::Linear NNX_FIELD(up);
  nnx::Linear NNX_FIELD(down);
  nnx::Dropout NNX_FIELD(dropout);
};

// Every variable's whole value, gathered.
inline std::map<std::string, at::Tensor> whole_values(const nnx::State& state) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [path, v] : state) out[path] = nnx::gather(v.value()).clone();
  return out;
}

inline void check_bitwise_equal(const std::map<std::string, at::Tensor>& a,
                                const std::map<std::string, at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [path, t] : a) {
    INFO(path);
    REQUIRE(b.count(path) == 1);
    CHECK(t.scalar_type() == b.at(path).scalar_type());
    CHECK(torch::equal(t.cpu(), b.at(path).cpu()));
  }
}

// A helper program's path: the environment variable `name` where set (the test programs carried
// to another machine, as tools/gpu/build-and-test.sh does), else the path of this build.
inline std::string helper_path(const char* name, const char* built) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? env : built;
}

}  // namespace nnx_test

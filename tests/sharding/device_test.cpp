// Device queries and intra-op thread defaults. Tests tagged [gpu] skip themselves without a GPU.
#include <catch2/catch.hpp>

#include <nnx/nnx.h>

#ifdef NNX_WITH_CUDA
#include <nnx/sharding/detail/nccl/nccl_status.h>
#endif

#include <torch/torch.h>

#include <ATen/Parallel.h>
#include <sched.h>

#include <cstdlib>
#include <optional>
#include <string>

using Catch::Matchers::Contains;

namespace {

// Sets (or unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1); else unsetenv(name);
  }
  ~ScopedEnv() { if (old_) setenv(name_, old_->c_str(), 1); else unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

int cores() {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  return CPU_COUNT(&set);
}

}  // namespace

TEST_CASE("a CUDA build loads the NCCL it was compiled against") {
#ifdef NNX_WITH_CUDA
  CHECK(nnx::built_with_cuda());
  CHECK(nnx::nccl_version() == nnx::detail::nccl_header_version());
  CHECK_THROWS_WITH(nnx::detail::nccl_check(3, "all_reduce", 1),
                    Contains("[all_reduce] NCCL failed on rank 1") && Contains("NCCL_DEBUG"));
  CHECK_NOTHROW(nnx::detail::nccl_check(0, "all_reduce", 1));
#else
  CHECK_FALSE(nnx::built_with_cuda());
  CHECK(nnx::nccl_version().empty());
#endif
}

TEST_CASE("a CUDA tensor round-trips through an Array", "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  auto host = torch::arange(12, torch::kFloat).reshape({3, 4});
  nnx::Array a(host.to(torch::kCUDA));
  CHECK(a.local().is_cuda());
  CHECK(torch::equal(nnx::relu(a - 5).local().cpu(), (host - 5).relu()));
}

TEST_CASE("intra-op threads default to the cores divided by the ranks on this machine") {
  ScopedEnv no_nnx("NNX_NUM_THREADS", std::nullopt), no_omp("OMP_NUM_THREADS", std::nullopt);
  {
    ScopedEnv ranks("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
    CHECK(nnx::default_num_threads() == cores());
  }
  {
    ScopedEnv ranks("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(cores() * 4));
    CHECK(nnx::default_num_threads() == 1);
  }
  {
    ScopedEnv ranks("OMPI_COMM_WORLD_LOCAL_SIZE", "2"), omp("OMP_NUM_THREADS", "3");
    CHECK(nnx::default_num_threads() == 3);
    ScopedEnv ours("NNX_NUM_THREADS", "5");
    CHECK(nnx::default_num_threads() == 5);
  }
  {
    ScopedEnv bad("NNX_NUM_THREADS", "many");
    CHECK_THROWS_WITH(nnx::default_num_threads(),
                      Contains("NNX_NUM_THREADS='many'") && Contains("positive integer"));
  }
  CHECK_THROWS_WITH(nnx::set_num_threads(0), Contains("positive"));
}

TEST_CASE("ranks sharing a machine split its cores", "[ranks2][ranks4]") {
  // mpirun announces the local ranks; MPI start-up applied the default unless the user chose.
  nnx::world_size();
  if (std::getenv("NNX_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) return;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  REQUIRE(local != nullptr);
  CHECK(at::get_num_threads() == std::max(1, cores() / std::atoi(local)));
}

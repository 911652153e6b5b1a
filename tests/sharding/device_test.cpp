// Device queries, the device choice and intra-op thread defaults. Tests tagged [gpu] skip
// themselves without a GPU.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>
#include <nnx/sharding/detail/device_choice.h>
#include <nnx/sharding/detail/device_engine.h>
#include <nnx/sharding/detail/engine_choice.h>

#ifdef NNX_WITH_CUDA
#include <nnx/sharding/detail/nccl/nccl_status.h>
#endif

#include <torch/types.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <ATen/Parallel.h>
#include <sched.h>

#include <cmath>
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

TEST_CASE("the exact gelu and silu nodes on CUDA give the composites' values and gradients there",
          "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  torch::manual_seed(4);
  const auto values = torch::randn({300, 1000}).to(torch::kCUDA) * 3;
  const auto cotangent = torch::rand({300, 1000}).to(torch::kCUDA);
  auto gelu = [](const torch::Tensor& x) {
    return 0.5 * x * torch::erfc(x * (-std::sqrt(2.0) / 2));
  };
  auto silu = [](const torch::Tensor& x) { return x * x.sigmoid(); };
  for (const bool exact_gelu : {true, false}) {
    INFO((exact_gelu ? "gelu(exact)" : "silu"));
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto x = values.to(dtype).clone().requires_grad_();
      const auto x_ref = values.to(dtype).clone().requires_grad_();
      const nnx::Array a(x);
      const auto y = (exact_gelu ? nnx::gelu(a, false) : nnx::silu(a)).local();
      const auto y_ref = exact_gelu ? gelu(x_ref) : silu(x_ref);
      CHECK(y.is_cuda());
      CHECK(torch::equal(y, y_ref));
      y.backward(cotangent.to(dtype));
      y_ref.backward(cotangent.to(dtype));
      CHECK(torch::equal(x.grad(), x_ref.grad()));
    }
  }
}

TEST_CASE("attention on CUDA (fused kernels) equals the CPU's, causal or not, any lengths",
          "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  torch::manual_seed(3);
  for (auto [q_len, kv_len] : {std::pair{5, 9}, std::pair{9, 5}, std::pair{16, 16}}) {
    for (bool causal : {false, true}) {
      INFO("q length " << q_len << ", k/v length " << kv_len << (causal ? ", causal" : ""));
      const auto q = torch::randn({2, 4, q_len, 64}), k = torch::randn({2, 4, kv_len, 64}),
                 v = torch::randn({2, 4, kv_len, 64});
      auto run = [&](torch::Device device) {
        // Fresh leaves per device (q.to(kCPU) is q itself: without detach the CPU run would make
        // q a leaf that needs grad, and q.to(kCUDA) a non-leaf with no .grad()).
        auto leaf = [&](const torch::Tensor& t) { return t.detach().to(device).requires_grad_(); };
        auto qd = leaf(q), kd = leaf(k), vd = leaf(v);
        auto out = nnx::dot_product_attention(nnx::Array(qd), nnx::Array(kd), nnx::Array(vd),
                                              causal).local();
        (out * out).sum().backward();
        return std::vector<torch::Tensor>{out.detach().cpu(), qd.grad().cpu(), kd.grad().cpu(),
                                          vd.grad().cpu()};
      };
      const auto host = run(torch::kCPU), gpu = run(torch::Device(torch::kCUDA, 0));
      // Elementwise within 1e-4, plus 1e-5 of the tensor's largest value: with a causal mask a
      // query that sees one key has dq exactly 0 on the CPU, where the fused kernel's backward
      // (its softmax gradient from rowsum(dO * O)) leaves rounding residue of the terms' size,
      // measured at 3e-5 to 5e-5 against largest values of 8 to 11 on an H100.
      for (size_t i = 0; i < host.size(); ++i) {
        const double largest = host[i].abs().max().item<double>();
        INFO("output, dq, dk, dv: " << i << "; largest difference "
                                    << (gpu[i] - host[i]).abs().max().item<double>()
                                    << ", largest value " << largest);
        CHECK(torch::allclose(gpu[i], host[i], 1e-4, 1e-5 * largest));
      }
    }
  }
}

TEST_CASE("layer_norm on CUDA (fused kernels) equals the CPU's, values and gradients", "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  torch::manual_seed(4);
  const auto x = torch::randn({3, 5, 96}) * 2 + 0.5, scale = torch::randn({96}),
             bias = torch::randn({96}), weights = torch::randn({3, 5, 96});
  for (bool with_params : {true, false}) {
    INFO((with_params ? "scale and bias" : "neither scale nor bias"));
    auto run = [&](torch::Device device) {
      auto leaf = [&](const torch::Tensor& t) { return t.detach().to(device).requires_grad_(); };
      auto xd = leaf(x), sd = leaf(scale), bd = leaf(bias);
      std::optional<nnx::Array> s, b;
      if (with_params) s = nnx::Array(sd), b = nnx::Array(bd);
      auto out = nnx::layer_norm(nnx::Array(xd), s, b, 1e-6).local();
      (out * weights.to(device)).sum().backward();
      std::vector<torch::Tensor> got{out.detach().cpu(), xd.grad().cpu()};
      if (with_params) got.insert(got.end(), {sd.grad().cpu(), bd.grad().cpu()});
      return got;
    };
    const auto host = run(torch::kCPU), gpu = run(torch::Device(torch::kCUDA, 0));
    for (size_t i = 0; i < host.size(); ++i) {
      INFO("output, dx, dscale, dbias: " << i << "; largest difference "
                                         << (gpu[i] - host[i]).abs().max().item<double>());
      CHECK(torch::allclose(gpu[i], host[i], 1e-4, 1e-5));
    }
  }
}

TEST_CASE("dropout on a CUDA array drops the same elements as on the CPU", "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  const auto x = torch::rand({64, 33}) + 1;
  const auto key = nnx::random::key(4);
  const auto host = nnx::dropout(nnx::Array(x), 0.3, key).local();
  const auto gpu = nnx::dropout(nnx::Array(x.to(torch::kCUDA)), 0.3, key).local();
  CHECK(gpu.is_cuda());
  CHECK(torch::equal(gpu.cpu().eq(0), host.eq(0)));
  CHECK(torch::allclose(gpu.cpu(), host));
}

TEST_CASE("labels and ids outside the classes or table give NaN on a GPU, not a device assert",
          "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  const auto logits = torch::randn({3, 4}, torch::kCUDA);
  const auto labels = torch::tensor({0, 4, 2}, torch::kLong).to(torch::kCUDA);
  const auto each = nnx::softmax_cross_entropy_with_integer_labels(nnx::Array(logits),
                                                                   nnx::Array(labels)).local();
  CHECK(torch::equal(torch::isnan(each).cpu(), torch::tensor({false, true, false})));
  CHECK(std::isnan(
      nnx::cross_entropy(nnx::Array(logits), nnx::Array(labels)).local().item<double>()));
  const auto table = torch::randn({5, 2}, torch::kCUDA);
  const auto rows = nnx::embedding_lookup(nnx::Array(table), nnx::Array(labels * 2)).local();
  CHECK(torch::equal(rows[0].cpu(), table[0].cpu()));
  CHECK(torch::isnan(rows[1]).all().item<bool>());  // id 8 of 5 rows
  CHECK(torch::equal(rows[2].cpu(), table[4].cpu()));
  // The device still works after them.
  CHECK(torch::equal((labels + 1).cpu(), torch::tensor({1, 5, 3}, torch::kLong)));
}

TEST_CASE("collective buffers are made on the device of the tensors they carry", "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  const auto options = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA, 0);
  auto buffer = nnx::comm_buffer({3, 5}, options);
  CHECK(buffer.is_cuda());
  CHECK(buffer.scalar_type() == torch::kBFloat16);
  CHECK(buffer.sizes() == torch::IntArrayRef{3, 5});
  // What the gradient buckets do: flat CUDA gradients packed into one buffer.
  auto grads = std::vector<torch::Tensor>{torch::ones({4}, options), torch::full({11}, 2, options)};
  auto flat = nnx::comm_buffer({15}, options);
  torch::cat_out(flat, grads);
  CHECK(torch::equal(flat.cpu(), torch::cat({torch::ones({4}), torch::full({11}, 2.0)})
                                     .to(torch::kBFloat16)));
  CHECK(nnx::comm_buffer({2}, torch::kFloat).is_cpu());
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

TEST_CASE("the device follows NNX_DEVICE, else one GPU per local rank, else the CPU") {
  using nnx::detail::choose_device;
  const c10::Device cpu(c10::kCPU);
  CHECK(choose_device(nullptr, 3, 0) == cpu);
  CHECK(choose_device(nullptr, 5, 4) == c10::Device(c10::kCUDA, 1));
  CHECK(choose_device("cpu", 0, 8) == cpu);
  CHECK(choose_device("cuda", 6, 4) == c10::Device(c10::kCUDA, 2));
  CHECK(choose_device("cuda:3", 0, 4) == c10::Device(c10::kCUDA, 3));
  CHECK_THROWS_WITH(choose_device("cuda:4", 0, 4),
                    Contains("NNX_DEVICE='cuda:4'") && Contains("devices 0..3"));
  CHECK_THROWS_WITH(choose_device("cuda", 0, 0),
                    Contains("sees no CUDA device") && Contains("NNX_DEVICE=cpu"));
  CHECK_THROWS_WITH(choose_device("gpu", 0, 2),
                    Contains("NNX_DEVICE='gpu'") && Contains("cpu, cuda"));
  CHECK_THROWS_WITH(choose_device("cuda:x", 0, 2), Contains("NNX_DEVICE='cuda:x'"));
}

TEST_CASE("the local rank is the one the launcher announces") {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  CHECK(nnx::local_rank() == 3);
  ScopedEnv no_ompi("OMPI_COMM_WORLD_LOCAL_RANK", std::nullopt),
      no_mpich("MPI_LOCALRANKID", std::nullopt), slurm("SLURM_LOCALID", "2");
  CHECK(nnx::local_rank() == 2);
  ScopedEnv no_slurm("SLURM_LOCALID", std::nullopt);
  CHECK(nnx::local_rank() == 0);
}

TEST_CASE("a mesh places this process's blocks on the default device", "[ranks2]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  CHECK(mesh->device() == nnx::default_device());
  if (nnx::cuda_device_count() == 0 && std::getenv("NNX_DEVICE") == nullptr)
    CHECK(mesh->device().is_cpu());
  auto whole = torch::arange(4 * nnx::world_size(), torch::kFloat);
  auto x = nnx::device_put(whole, {mesh, nnx::P("data")});
  CHECK(x.local().device() == mesh->device());
  CHECK(torch::equal(nnx::gather(x).cpu(), whole));
}

TEST_CASE("CUDA tensors take every collective on the engine chosen", "[ranks2][gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  auto world = nnx::Communicator::world();
  const int n = world.size(), r = world.rank();
  const auto cuda = c10::Device(c10::kCUDA, nnx::local_rank() % nnx::cuda_device_count());
  auto mine = torch::arange(4 * n, torch::kFloat) + 100 * r;  // host reference
  auto sum = torch::zeros({4 * n});
  for (int k = 0; k < n; ++k) sum += torch::arange(4 * n, torch::kFloat) + 100 * k;
  auto t = mine.to(cuda);
  world.all_reduce_(t);
  CHECK(t.is_cuda());
  CHECK(torch::equal(t.cpu(), sum));
  auto gathered = world.all_gather(mine.to(cuda), 0);
  CHECK(gathered.is_cuda());
  CHECK(torch::equal(gathered.cpu(), world.all_gather(mine, 0)));  // the CPU engine's, in order
  auto scattered = world.reduce_scatter(mine.to(cuda), 0);
  CHECK(torch::equal(scattered.cpu(), sum.chunk(n)[r]));
  auto b = mine.to(cuda);
  world.broadcast_(b, 0);
  CHECK(torch::equal(b.cpu(), torch::arange(4 * n, torch::kFloat)));
  auto async = mine.to(cuda);
  world.all_reduce_async_(async).wait();
  CHECK(torch::equal(async.cpu(), sum));
  // all_to_all, permute and the async reduce_scatter equal the CPU engine's results.
  auto grid = mine.view({n, 4});
  CHECK(torch::equal(world.all_to_all(grid.to(cuda), 0, 1).cpu(), world.all_to_all(grid, 0, 1)));
  std::vector<std::pair<int, int>> ring;
  for (int k = 0; k < n; ++k) ring.emplace_back(k, (k + 1) % n);
  CHECK(torch::equal(world.permute(mine.to(cuda), ring).cpu(), world.permute(mine, ring)));
  // The _into forms write CUDA outputs on the same engine.
  auto gathered_into = torch::empty({4 * n * n}, cuda);
  world.all_gather_into(gathered_into, mine.to(cuda));
  CHECK(torch::equal(gathered_into.cpu(), world.all_gather(mine, 0)));
  auto scattered_into = torch::empty({4}, cuda);
  world.reduce_scatter_into(scattered_into, mine.to(cuda));
  CHECK(torch::equal(scattered_into.cpu(), sum.chunk(n)[r]));
  auto exchanged = torch::empty({4 * n}, cuda);
  world.all_to_all_into(exchanged, mine.to(cuda));
  CHECK(torch::equal(exchanged.cpu(), world.all_to_all(mine, 0, 0)));
  auto stacked = mine.view({n, 4}).contiguous();
  auto out_host = torch::empty({4}), out_cuda = torch::empty({4}, cuda);
  world.reduce_scatter_async(stacked, out_host).wait();
  world.reduce_scatter_async(stacked.to(cuda), out_cuda).wait();
  CHECK(torch::equal(out_cuda.cpu(), out_host));
}

TEST_CASE("the NCCL engine runs every op and dtype on a group of one GPU", "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  // A group of one over MPI_COMM_SELF: the engine's bootstrap, streams, events and NCCL's own
  // kernels run as on several GPUs, each op's result being its input.
  nnx::world_size();
  const c10::Device cuda(c10::kCUDA, 0);
  auto engine = nnx::detail::make_device_engine(MPI_COMM_SELF, 0, 1, cuda, "self");
  REQUIRE(engine != nullptr);
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kLong,
                     torch::kInt, torch::kChar, torch::kByte}) {
    INFO(c10::toString(dtype));
    const auto host = (torch::arange(24) % 13).to(dtype);
    const auto on_gpu = [&] { return host.to(cuda); };
    for (auto op : {nnx::ReduceOp::sum, nnx::ReduceOp::max, nnx::ReduceOp::min}) {
      auto buffer = on_gpu();
      engine->all_reduce(buffer, op);
      CHECK(torch::equal(buffer.cpu(), host));
    }
    auto stacked = torch::empty({1, 24}, host.options().device(cuda));
    engine->all_gather(on_gpu(), stacked);
    CHECK(torch::equal(stacked.cpu().view({24}), host));
    auto scattered = torch::empty({24}, host.options().device(cuda));
    engine->reduce_scatter(on_gpu().view({1, 24}), scattered);
    CHECK(torch::equal(scattered.cpu(), host));
    auto received = torch::empty({24}, host.options().device(cuda));
    engine->all_to_all(on_gpu(), received);
    CHECK(torch::equal(received.cpu(), host));
    auto broadcast = on_gpu();
    engine->broadcast(broadcast, 0);
    CHECK(torch::equal(broadcast.cpu(), host));
    auto permuted = torch::zeros({24}, host.options().device(cuda));
    engine->permute(on_gpu(), permuted, 0, 0);
    CHECK(torch::equal(permuted.cpu(), host));
  }
  // The async forms: the caller's stream waits at wait(), and done() turns true.
  auto buffer = torch::arange(1 << 20, torch::kFloat).to(cuda);
  auto pending = engine->all_reduce_async(buffer, nnx::ReduceOp::sum);
  pending->wait();
  CHECK(torch::equal(buffer.cpu(), torch::arange(1 << 20, torch::kFloat)));
  auto out = torch::empty({1 << 20}, buffer.options());
  auto scattering = engine->reduce_scatter_async(buffer.view({1, 1 << 20}), out);
  scattering->wait();
  torch::cuda::synchronize();
  CHECK(scattering->done());
  CHECK(torch::equal(out.cpu(), buffer.cpu()));
}

TEST_CASE("CUDA tensors go through NCCL unless ranks share a GPU or NNX_ENGINE says mpi") {
  using nnx::detail::choose_engine;
  using nnx::detail::Engine;
  using nnx::detail::EngineSeat;
  using S = nnx::detail::EngineSetting;
  CHECK(nnx::detail::parse_engine_setting(nullptr) == S::automatic);
  CHECK(nnx::detail::parse_engine_setting("") == S::automatic);
  CHECK(nnx::detail::parse_engine_setting("nccl") == S::nccl);
  CHECK(nnx::detail::parse_engine_setting("mpi") == S::mpi);
  CHECK_THROWS_WITH(nnx::detail::parse_engine_setting("gloo"),
                    Contains("NNX_ENGINE='gloo'") && Contains("use nccl or mpi"));

  const std::vector<EngineSeat> own_gpus{{1, 10, S::automatic}, {1, 11, S::automatic},
                                         {2, 10, S::automatic}};  // same bus id, other host
  CHECK(choose_engine(own_gpus, true, "world") == Engine::nccl);
  CHECK(choose_engine(own_gpus, false, "world") == Engine::mpi_staging);
  const std::vector<EngineSeat> shared{{1, 10, S::automatic}, {1, 10, S::automatic}};
  CHECK(choose_engine(shared, true, "world") == Engine::mpi_staging);
  std::vector<EngineSeat> asked_mpi = own_gpus;
  for (auto& seat : asked_mpi) seat.setting = S::mpi;
  CHECK(choose_engine(asked_mpi, true, "world") == Engine::mpi_staging);

  std::vector<EngineSeat> forced{{1, 10, S::nccl}, {1, 10, S::nccl}};
  CHECK_THROWS_WITH(choose_engine(forced, true, "mesh(data)"),
                    Contains("member 1 of 'mesh(data)' shares its GPU") &&
                        Contains("NNX_ENGINE=mpi"));
  forced[1].gpu = 11;
  CHECK(choose_engine(forced, true, "world") == Engine::nccl);
  CHECK_THROWS_WITH(choose_engine(forced, false, "world"), Contains("has no NCCL"));
  forced[1].setting = S::mpi;
  CHECK_THROWS_WITH(choose_engine(forced, true, "world"),
                    Contains("member 1 has NNX_ENGINE=mpi") && Contains("alike on every rank"));
}

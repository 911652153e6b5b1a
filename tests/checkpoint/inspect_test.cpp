// describe, verify, export and import, as functions and through the nnx-ckpt command; exported
// files read by an independent numpy reader; imported files restored onto a mesh.
#include "checkpoint_test_util.h"

#include <cstdio>
#include <sstream>

using Catch::Matchers::Contains;
namespace ckpt = nnx::checkpoint;
using nnx::none;
using nnx::P;

namespace {

// Runs a shell command; returns its exit status and standard output.
std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::map<std::string, at::Tensor> full_values() {
  return {{"blocks.0.kernel", torch::arange(8 * 12, torch::kFloat).reshape({8, 12}) / 7},
          {"blocks.0.bias", torch::arange(12, torch::kDouble) - 5},
          {"step", torch::tensor(int64_t{3})}};
}

nnx::PartitionSpec spec_of(const std::string& path, bool rows) {
  if (path == "blocks.0.kernel") return rows ? P("x", none) : P(none, "x");
  if (path == "blocks.0.bias") return rows ? P("x") : P();
  return P();
}

nnx::State on_mesh(const std::shared_ptr<const nnx::Mesh>& mesh, bool rows) {
  nnx::State s;
  for (const auto& [path, t] : full_values())
    s.add(path, nnx::Param(mesh ? nnx::device_put(t, {mesh, spec_of(path, rows)}) : nnx::Array(t)));
  return s;
}

// numpy's view of a safetensors file: "name dtype [shape] sum" per line.
std::string numpy_view(const std::string& file) {
  auto [status, out] = run(fmt::format("{} {} {}", nnx_test::helper_path("NNX_PYTHON", NNX_PYTHON),
                                           nnx_test::helper_path("NNX_NUMPY_READ", NNX_NUMPY_READ),
                                           file));
  INFO(out);
  REQUIRE(status == 0);
  return out;
}

std::string expected_view(const std::map<std::string, at::Tensor>& values,
                          const std::map<std::string, std::string>& names = {}) {
  std::map<std::string, std::string> lines;
  for (const auto& [path, t] : values) {
    const std::string name = names.count(path) ? names.at(path) : path;
    const char* dtype = t.scalar_type() == at::kFloat ? "F32" : t.scalar_type() == at::kDouble ? "F64" : "I64";
    lines[name] = fmt::format("{} {} [{}] {:.6f}\n", name, dtype, fmt::join(t.sizes(), ","),
                              t.to(at::kDouble).sum().item<double>());
  }
  std::string out;
  for (const auto& [name, line] : lines) out += line;
  return out;
}

}  // namespace

TEST_CASE("describe lists the tree and verify finds every damaged chunk") {
  nnx_test::SharedDir dir;
  const std::string c = dir.sub("c");
  ckpt::save(c, on_mesh(nullptr, true));
  const std::string tree = ckpt::describe(c);
  CHECK_THAT(tree, Contains("saved by 1 rank(s)") && Contains("blocks.0.kernel") &&
                       Contains("F32   [8, 12]  whole  384 bytes, 1 chunk(s)") &&
                       Contains("blocks.0.bias") && Contains("I64   []"));
  auto good = ckpt::verify(c);
  CHECK(good.ok());
  CHECK(good.variables == 3);
  CHECK(good.chunks == 3);
  CHECK(good.bytes == 384 + 96 + 8);

  const std::string shard = c + "/rank-00000.safetensors";
  auto bytes = nnx_test::read_bytes(shard);
  // The file holds bias (96 bytes), kernel (384), step (8), in path order: a byte of the bias.
  bytes[bytes.size() - 8 - 384 - 10] ^= 1;
  nnx_test::write_bytes(shard, bytes);
  auto flipped = ckpt::verify(c);
  REQUIRE(flipped.problems.size() == 1);
  CHECK_THAT(flipped.problems[0], Contains("blocks.0.bias") && Contains(shard) &&
                                      Contains("fails its checksum"));
  nnx_test::write_bytes(shard, bytes.substr(0, bytes.size() - 1));
  auto truncated = ckpt::verify(c);
  REQUIRE_FALSE(truncated.ok());
  CHECK_THAT(truncated.problems[0], Contains(shard));
}

TEST_CASE("the nnx-ckpt command lists, verifies, exports and imports") {
  nnx_test::SharedDir dir;
  const std::string tool = nnx_test::helper_path("NNX_CKPT_TOOL", NNX_CKPT_TOOL), c = dir.sub("c");
  ckpt::save(c, on_mesh(nullptr, true));
  auto [ls_status, ls] = run(tool + " ls " + c);
  CHECK(ls_status == 0);
  CHECK_THAT(ls, Contains("blocks.0.kernel") && Contains("[8, 12]"));
  auto [verify_status, verified] = run(tool + " verify " + c);
  CHECK(verify_status == 0);
  CHECK_THAT(verified, Contains("3 variable(s), 3 chunk(s), 488 bytes checked, 0 problem(s)"));
  CHECK(run(tool + " export " + c + " " + dir.sub("all.safetensors")).first == 0);
  CHECK(numpy_view(dir.sub("all.safetensors")) == expected_view(full_values()));
  auto [import_status, imported] = run(tool + " import " + dir.sub("all.safetensors") + " " +
                                       dir.sub("i") + " --rename blocks.0.=layer.");
  CHECK(import_status == 0);
  CHECK_THAT(run(tool + " ls " + dir.sub("i")).second, Contains("layer.kernel"));
  // Wrong use: a usage message and status 2; a damaged checkpoint: status 1.
  CHECK(run(tool + " frobnicate").first == 2);
  auto [help_status, help] = run(tool + " --help");
  CHECK(help_status == 0);
  CHECK_THAT(help, Contains("nnx-ckpt verify DIR") && !Contains("unknown command"));
  CHECK(run(tool + " import a b --rename nothing").first == 2);
  CHECK(run(tool + " verify " + dir.sub("missing")).first == 1);
}

TEST_CASE("export gathers a sharded checkpoint whole; import restores plain files onto a mesh",
          "[ranks4]") {
  nnx_test::SharedDir dir;
  auto mesh = nnx::make_mesh({4}, {"x"});
  ckpt::save(dir.sub("sharded"), on_mesh(mesh, true));
  if (nnx::world_rank() == 0) {
    ckpt::export_safetensors(dir.sub("sharded"), dir.sub("whole.safetensors"));
    CHECK(numpy_view(dir.sub("whole.safetensors")) == expected_view(full_values()));
    ckpt::import_safetensors(dir.sub("whole.safetensors"), dir.sub("imported"),
                             {{"blocks.0.", "layer."}});
    // A file as a hub would ship it: half precision, its own names.
    auto weight = torch::arange(8 * 12, torch::kFloat).reshape({8, 12}).to(at::kHalf);
    ckpt::write_safetensors(dir.sub("hub.safetensors"),
                            {{"model.proj.weight", "F16", {8, 12}, weight.data_ptr(),
                              static_cast<uint64_t>(weight.nbytes())}});
    ckpt::import_safetensors(dir.sub("hub.safetensors"), dir.sub("hub"), {{"model.proj.", "proj."}});
  }
  nnx::Communicator::world().barrier();

  // Every rank reads the imported whole arrays whole, to check them, and keeps its columns;
  // unchecked, it reads only its columns.
  nnx::State target;
  for (const auto& [path, t] : full_values()) {
    auto a = nnx::Array::abstract(t.sizes().vec(), t.scalar_type());
    a.set_sharding(nnx::NamedSharding{mesh, spec_of(path, false)});
    target.add(path == "step" ? path : "layer." + path.substr(9), nnx::Param(a));
  }
  ckpt::io_counts() = {};
  auto restored = ckpt::restore(dir.sub("imported"), target);
  CHECK(torch::equal(nnx::gather(restored["layer.kernel"].value()).cpu(),
                     full_values()["blocks.0.kernel"]));
  CHECK(torch::equal(nnx::gather(restored["layer.bias"].value()).cpu(),
                     full_values()["blocks.0.bias"]));
  CHECK(restored["layer.kernel"].tensor().sizes() == at::IntArrayRef({8, 3}));
  CHECK(ckpt::io_counts().bytes_read == 8 * 12 * 4 + 12 * 8 + 8);
  ckpt::io_counts() = {};
  auto columns = ckpt::restore(dir.sub("imported"), target, {.verify_all_checksums = false});
  CHECK(torch::equal(columns["layer.kernel"].tensor(), restored["layer.kernel"].tensor()));
  CHECK(ckpt::io_counts().bytes_read == 8 * 3 * 4 + 12 * 8 + 8);

  auto proj = nnx::Array::abstract({8, 12}, at::kFloat);
  proj.set_sharding(nnx::NamedSharding{mesh, P("x", none)});
  nnx::State hub_target;
  hub_target.add("proj.weight", nnx::Param(proj));
  auto hub = ckpt::restore(dir.sub("hub"), hub_target);
  CHECK(hub["proj.weight"].dtype() == at::kFloat);
  CHECK(torch::equal(nnx::gather(hub["proj.weight"].value()).cpu(),
                     torch::arange(8 * 12, torch::kFloat).reshape({8, 12})));
}

// Faults a sweep found, each now an error or handled: export writing into its own input, a
// manifest altered against its shards, damaged bytes echoed raw, saving over a checkpoint, and
// a failed background save swallowing the next step, options that the manifest cannot store, and
// a manager deleting the step it had just saved among a later run's steps.
#include "checkpoint_test_util.h"

#include <fstream>

using Catch::Matchers::Contains;
namespace ckpt = nnx::checkpoint;

namespace {
nnx::State small_state() {
  nnx::State s;
  s.add("w", nnx::Param(nnx::Array(torch::arange(6, torch::kFloat).reshape({2, 3}))));
  s.add("b", nnx::Param(nnx::Array(torch::ones({3}))));
  return s;
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
}  // namespace

TEST_CASE("export refuses to write inside the checkpoint it reads, leaving it intact") {
  nnx_test::SharedDir dir;
  ckpt::save(dir.sub("c"), small_state());
  const std::string manifest = slurp(dir.sub("c/manifest.json"));
  CHECK_THROWS_WITH(ckpt::export_safetensors(dir.sub("c"), dir.sub("c/manifest.json")),
                    Contains("lies inside the checkpoint") && Contains("write the export elsewhere"));
  CHECK_THROWS_WITH(ckpt::export_safetensors(dir.sub("c"), dir.sub("c/../c/whole.safetensors")),
                    Contains("lies inside the checkpoint"));
  CHECK(slurp(dir.sub("c/manifest.json")) == manifest);
  CHECK(ckpt::verify(dir.sub("c")).problems.empty());
  ckpt::export_safetensors(dir.sub("c"), dir.sub("whole.safetensors"));
  CHECK(std::filesystem::file_size(dir.sub("whole.safetensors")) > 0);
}

TEST_CASE("export checks each chunk against its shard's own header") {
  nnx_test::SharedDir dir;
  ckpt::save(dir.sub("c"), small_state());
  std::string manifest = slurp(dir.sub("c/manifest.json"));
  const auto at = manifest.find("\"F32\"");
  REQUIRE(at != std::string::npos);
  manifest.replace(at, 5, "\"I32\"");  // float bits relabelled as int32
  std::ofstream(dir.sub("c/manifest.json"), std::ios::binary | std::ios::trunc) << manifest;
  CHECK_THROWS_WITH(ckpt::export_safetensors(dir.sub("c"), dir.sub("out.safetensors")),
                    Contains("the manifest says I32") && Contains("holds tensor") &&
                        Contains("as F32") && Contains("nothing was exported"));
  CHECK_FALSE(std::filesystem::exists(dir.sub("out.safetensors")));
}

TEST_CASE("export refuses a shard of another size than recorded, or a missing one") {
  nnx_test::SharedDir dir;
  ckpt::save(dir.sub("c"), small_state());
  const std::string shard = dir.sub("c/rank-00000.safetensors");
  std::ofstream(shard, std::ios::binary | std::ios::app) << "tail";
  CHECK_THROWS_WITH(ckpt::export_safetensors(dir.sub("c"), dir.sub("out.safetensors")),
                    Contains(shard) && Contains("bytes but the manifest records") &&
                        Contains("nothing was exported"));
  std::filesystem::remove(shard);
  CHECK_THROWS_WITH(ckpt::export_safetensors(dir.sub("c"), dir.sub("out.safetensors")),
                    Contains(shard) && Contains("holds part of '") && Contains("is missing"));
  CHECK_FALSE(std::filesystem::exists(dir.sub("out.safetensors")));
}

TEST_CASE("a damaged header's bytes are shown escaped, never raw") {
  nnx_test::SharedDir dir;
  const std::string file = dir.sub("bad.safetensors");
  std::string header = "{\"w\": \xff\xfe\x01}";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  std::ofstream(file, std::ios::binary) << bytes << header;
  try {
    ckpt::InputFile in(file);
    ckpt::read_safetensors_header(in, file);
    FAIL("no error for a damaged header");
  } catch (const nnx::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("not valid JSON") != std::string::npos);
    for (unsigned char c : message) CHECK((c >= 0x20 && c < 0x7f));
  }
}

TEST_CASE("save refuses an existing checkpoint unless told to overwrite it") {
  nnx_test::SharedDir dir;
  ckpt::save(dir.sub("c"), small_state());
  nnx::State changed = small_state();
  changed.at("w").value().local().mul_(10);
  CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), changed),
                    Contains("already holds a checkpoint") && Contains(".overwrite = true"));
  ckpt::save(dir.sub("c"), changed, {.overwrite = true});
  auto restored = ckpt::restore(dir.sub("c"), small_state());
  CHECK(torch::equal(restored.at("w").value().local(), changed.at("w").value().local()));
  CHECK(ckpt::verify(dir.sub("c")).problems.empty());
}

TEST_CASE("a failed background save is reported by the next save, which still saves its step") {
  nnx_test::SharedDir dir;
  ckpt::CheckpointManager manager(dir.sub("run"), {.async = true});
  std::ofstream(dir.sub("run/5")) << "a file where step 5's directory should go";
  CHECK(manager.save(5, small_state()));  // fails in the background
  CHECK_THROWS_WITH(manager.save(6, small_state()),
                    Contains("the previous background save failed") &&
                        Contains("step 6 is being saved"));
  manager.wait_until_finished();
  CHECK(manager.latest_step() == 6);
  CHECK(manager.all_steps() == std::vector<int64_t>{6});
}

TEST_CASE("a failed background save is reported even when the next save fails before writing") {
  nnx_test::SharedDir dir;
  ckpt::CheckpointManager manager(dir.sub("run"), {.async = true});
  std::ofstream(dir.sub("run/5")) << "a file where step 5's directory should go";
  CHECK(manager.save(5, small_state()));  // fails in the background
  nnx::State abstract;
  abstract.add("w", nnx::Param(nnx::Array::abstract({2}, at::kFloat)));
  // Both failures are named: step 5's used to be lost with this call.
  CHECK_THROWS_WITH(manager.save(6, abstract),
                    Contains("step 6 was not saved: ") &&
                        Contains("'w' has no values (abstract)") &&
                        Contains("the previous background save failed too: "));
  CHECK_NOTHROW(manager.wait_until_finished());  // reported once, not again
  CHECK(manager.save(7, small_state()));
  manager.wait_until_finished();
  CHECK(manager.all_steps() == std::vector<int64_t>{7});
}

TEST_CASE("save checks its options before it deletes or writes anything") {
  nnx_test::SharedDir dir;
  ckpt::save(dir.sub("c"), small_state(), {.metadata = {{"epoch", 1}}});
  const std::string manifest = slurp(dir.sub("c/manifest.json"));
  auto refused = [&](const ckpt::SaveOptions& options, const std::string& what) {
    CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), small_state(), options), Contains(what));
    CHECK(slurp(dir.sub("c/manifest.json")) == manifest);  // the old checkpoint is intact
    CHECK(ckpt::verify(dir.sub("c")).problems.empty());
  };
  refused({.metadata = nlohmann::json::array(), .overwrite = true},
          "SaveOptions::metadata must be a JSON object");
  refused({.metadata = {{"loss", std::nan("")}}, .overwrite = true},
          "SaveOptions::metadata holds nan at '/loss'");
  refused({.per_rank = {{"files", {"a", std::string("\xff")}}}, .overwrite = true},
          "SaveOptions::per_rank cannot be written as JSON");
  refused({.per_rank = {{"files", {1.0, -INFINITY}}}, .overwrite = true}, "at '/files/1'");
  CHECK(ckpt::read_metadata(dir.sub("c")) == nlohmann::json{{"epoch", 1}});
  // The manager checks them too, and the step can be saved once they are right.
  ckpt::CheckpointManager manager(dir.sub("run"), {.async = true});
  CHECK_THROWS_WITH(manager.save(1, small_state(), {.per_rank = std::string("\xfe")}),
                    Contains("valid UTF-8"));
  CHECK(manager.save(1, small_state(), {.per_rank = "loader at 7"}));
  manager.wait_until_finished();
  CHECK(manager.restore_per_rank(1) == "loader at 7");
}

TEST_CASE("a manager saves no step at or before the newest it has saved or found, as Orbax's") {
  nnx_test::SharedDir dir;
  {
    ckpt::CheckpointManager earlier(dir.sub("run"), {.max_to_keep = 3});
    for (int64_t step : {800, 900, 1000}) CHECK(earlier.save(step, small_state()));
    CHECK_FALSE(earlier.save(900, small_state()));
  }
  // A new run in the same directory: its early steps used to be saved and at once deleted by
  // max_to_keep (step 0, the oldest), while save returned true.
  ckpt::CheckpointManager manager(dir.sub("run"), {.max_to_keep = 3});
  CHECK_FALSE(manager.should_save(0));
  CHECK_FALSE(manager.save(0, small_state()));
  CHECK_FALSE(manager.save(1000, small_state()));
  CHECK(manager.all_steps() == std::vector<int64_t>{800, 900, 1000});
  CHECK(manager.save(1001, small_state()));
  CHECK(manager.all_steps() == std::vector<int64_t>{900, 1000, 1001});
  CHECK_FALSE(manager.save(1001, small_state()));
}

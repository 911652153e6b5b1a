// checkpoint::save: plan the blocks each rank writes, write them, commit the manifest last.
#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/safetensors.h>
#include <nnx/checkpoint/detail/save_plan.h>
#include <nnx/core/error.h>
#include <nnx/sharding/metadata.h>
#include <nnx/sharding/gradient.h>
#include <nnx/sharding/world.h>

#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

namespace nnx::checkpoint {

IoCounts& io_counts() {
  thread_local IoCounts counts;
  return counts;
}

namespace detail {

namespace {

const std::vector<std::pair<at::ScalarType, std::string>>& dtype_table() {
  static const std::vector<std::pair<at::ScalarType, std::string>> table{
      {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},    {at::kBool, "BOOL"}};
  return table;
}

// Every rank's string, in rank order (sizes first, then the padded bytes).
std::vector<std::string> all_gather_strings(const Communicator& comm, const std::string& mine) {
  auto size = torch::full({1}, static_cast<int64_t>(mine.size()), torch::kLong);
  auto sizes = comm.all_gather(size, 0);
  const int64_t longest = std::max<int64_t>(1, sizes.max().item<int64_t>());
  auto buffer = torch::zeros({1, longest}, torch::kByte);
  std::memcpy(buffer.data_ptr(), mine.data(), mine.size());
  auto all = comm.all_gather(buffer, 0).contiguous();
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(all[r].data_ptr()), sizes[r].item<int64_t>());
  return out;
}

// Root's string on every rank.
std::string broadcast_string(const Communicator& comm, const std::string& text, int root = 0) {
  auto size = torch::full({1}, static_cast<int64_t>(text.size()), torch::kLong);
  comm.broadcast_(size, root);
  auto buffer = torch::zeros({std::max<int64_t>(1, size.item<int64_t>())}, torch::kByte);
  if (comm.rank() == root) std::memcpy(buffer.data_ptr(), text.data(), text.size());
  comm.broadcast_(buffer, root);
  return std::string(reinterpret_cast<const char*>(buffer.data_ptr()), size.item<int64_t>());
}

std::string file_name_of(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

}  // namespace

std::string safetensors_dtype(at::ScalarType dtype, const std::string& what) {
  for (const auto& [t, name] : dtype_table())
    if (t == dtype) return name;
  NNX_FAIL("{} is {}, which checkpoints do not store; convert it to a float or integer type",
           what, dtype_name(dtype));
}

at::ScalarType torch_dtype(const std::string& name, const std::string& what) {
  for (const auto& [t, n] : dtype_table())
    if (n == name) return t;
  NNX_FAIL("{} is stored as {}, which LibTorch has no type for", what, name);
}

SavePlan plan_save(const State& state, int rank, bool copy) {
  SavePlan plan;
  for (const auto& [path, v] : state) {
    const Array& value = v.value();
    const std::string what = fmt::format("'{}'", path);
    NNX_CHECK(!value.is_abstract(), "{} has no values (abstract); materialize it before saving",
              what);
    NNX_CHECK(value.partial_axes().empty(),
              "{} is a pending sum over ({}); redistribute it to a plain layout before saving", what,
              fmt::join(value.partial_axes(), ", "));
    VariableRecord record;
    record.path = path;
    record.kind = v.type().name;
    record.dtype = safetensors_dtype(value.dtype(), what);
    record.shape = value.shape();
    record.metadata = v.metadata().to_json();
    bool writes = rank == 0;
    if (value.mesh()) {
      const Mesh& mesh = *value.mesh();
      record.mesh = {mesh.axis_names(), mesh.shape()};
      record.spec = to_json(value.spec());
      // One replica writes each distinct block: coordinate 0 on every axis it is copied along.
      writes = true;
      for (const auto& axis : replica_axes(value)) writes = writes && mesh.coordinate(axis) == 0;
    }
    if (writes) {
      at::Tensor data = value.local().detach().to(at::kCPU).contiguous();
      if (copy && data.data_ptr() == value.local().data_ptr()) data = data.clone();
      std::vector<int64_t> start = value.mesh() ? value.local_box().start
                                                : std::vector<int64_t>(value.shape().size(), 0);
      plan.blocks.push_back({path, data, start});
    }
    plan.variables.push_back(std::move(record));
  }
  return plan;
}

void prepare_directory(const Communicator& comm, const std::string& dir, bool overwrite) {
  std::string error;
  if (comm.rank() == 0) {
    try {
      NNX_CHECK(!dir.empty(), "the checkpoint directory is an empty string");
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      NNX_CHECK(!ec, "cannot create the checkpoint directory '{}': {}", dir, ec.message());
      if (overwrite && std::filesystem::exists(dir + "/manifest.json")) {
        std::filesystem::remove(dir + "/manifest.json");  // no longer a checkpoint from here on
        fsync_directory(dir);
        for (const auto& entry : std::filesystem::directory_iterator(dir))
          if (entry.path().extension() == ".safetensors") std::filesystem::remove(entry.path());
      }
      NNX_CHECK(!std::filesystem::exists(dir + "/manifest.json"),
                "'{}' already holds a checkpoint; save to a new directory, delete it first, or "
                "pass {{.overwrite = true}}", dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = broadcast_string(comm, error);
  if (!error.empty()) throw Error(error);
}

void raise_if_any_failed(const Communicator& comm, const std::string& error) {
  auto count = torch::full({1}, error.empty() ? 0 : 1, torch::kLong);
  comm.all_reduce_(count, ReduceOp::sum);
  if (count.item<int64_t>() == 0) return;
  const auto errors = all_gather_strings(comm, error);
  std::vector<int> failed;
  for (int r = 0; r < comm.size(); ++r)
    if (!errors[r].empty()) failed.push_back(r);
  const std::string& first = errors[failed[0]];
  if (failed.size() == 1) {
    if (!error.empty()) throw Error(error);
    throw Error(fmt::format("rank {} failed: {}", failed[0], first));
  }
  // Several ranks: the message once when they agree (a damaged manifest), else each rank's.
  if (std::all_of(failed.begin(), failed.end(), [&](int r) { return errors[r] == first; }))
    throw Error(fmt::format("ranks {} failed: {}", fmt::join(failed, ", "), first));
  std::vector<std::string> others;
  for (size_t i = 1; i < failed.size(); ++i)
    others.push_back(fmt::format("rank {}: {}", failed[i], errors[failed[i]]));
  throw Error(fmt::format("ranks {} failed; rank {}: {}{}", fmt::join(failed, ", "), failed[0],
                          first, indented_list(others)));
}

namespace {

// One line per variable: what every rank must agree on before anything is written.
std::string variables_summary(const SavePlan& plan) {
  std::string out;
  for (const auto& v : plan.variables)
    out += fmt::format("{} {} {} {} {}\n", v.path, v.dtype, fmt::join(v.shape, "x"), v.spec.dump(),
                       fmt::join(v.mesh.axis_sizes, "x"));
  return out;
}

std::set<std::string> lines_of(const std::string& text) {
  std::set<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.insert(line);
  return lines;
}

// Every rank must save the same variables with the same dtypes, shapes and layouts: a variable
// only some ranks hold would otherwise be dropped (one rank writes a replicated variable) or
// saved inconsistently. The same error on every rank, listing what differs from rank 0.
void check_same_variables(const Communicator& comm, const SavePlan& plan) {
  const auto summaries = all_gather_strings(comm, variables_summary(plan));
  std::vector<std::string> problems;
  const auto reference = lines_of(summaries[0]);
  for (size_t r = 1; r < summaries.size(); ++r) {
    if (summaries[r] == summaries[0]) continue;
    const auto theirs = lines_of(summaries[r]);
    for (const auto& line : theirs)
      if (!reference.count(line)) problems.push_back(fmt::format("rank {} has {}", r, line));
    for (const auto& line : reference)
      if (!theirs.count(line)) problems.push_back(fmt::format("rank {} lacks {}", r, line));
  }
  if (problems.size() > 20) {
    const size_t more = problems.size() - 20;
    problems.resize(20);
    problems.push_back(fmt::format("... and {} more", more));
  }
  NNX_CHECK(problems.empty(),
            "nothing was saved: the ranks' states differ from rank 0's (path dtype shape spec "
            "mesh):{}\nevery rank must save the same variables, laid out alike",
            indented_list(problems));
}

}  // namespace

SavePlan plan_save_everywhere(const Communicator& comm, const State& state, bool copy) {
  SavePlan plan;
  std::string error;
  try {
    plan = plan_save(state, comm.rank(), copy);
  } catch (const std::exception& e) {
    error = e.what();
  }
  raise_if_any_failed(comm, error);
  check_same_variables(comm, plan);
  return plan;
}

void write_and_commit(const Communicator& comm, const std::string& dir, const SavePlan& plan,
                      const SaveOptions& options) {
  const int rank = comm.rank();
  // This rank's file and records; a failure becomes an "error" record, so that no rank hangs.
  nlohmann::json mine = {{"rank", rank}, {"per_rank", options.per_rank}};
  try {
    if (!plan.blocks.empty()) {
      std::vector<TensorToWrite> tensors;
      for (const auto& b : plan.blocks)
        tensors.push_back({b.path, safetensors_dtype(b.data.scalar_type(), b.path),
                           b.data.sizes().vec(), b.data.data_ptr(),
                           static_cast<uint64_t>(b.data.nbytes())});
      const std::string name = file_name_of(rank);
      auto written = write_safetensors(dir + "/" + name, tensors);
      // The tensors lie back to back: the file ends where the last one does.
      mine["file"] = {{"name", name}, {"size", written.back().file_offset + written.back().nbytes}};
      nlohmann::json chunks = nlohmann::json::array();
      for (size_t i = 0; i < written.size(); ++i) {
        chunks.push_back({{"path", plan.blocks[i].path},
                          {"start", plan.blocks[i].start},
                          {"shape", plan.blocks[i].data.sizes().vec()},
                          {"offset", written[i].file_offset},
                          {"nbytes", written[i].nbytes},
                          {"crc32c", chunk_checksum(written[i].crc32c, plan.blocks[i].start,
                                                    plan.blocks[i].data.sizes().vec())}});
        io_counts().bytes_written += static_cast<int64_t>(written[i].nbytes);
      }
      mine["chunks"] = std::move(chunks);
    }
  } catch (const std::exception& e) {
    mine["error"] = e.what();
  }
  auto records = all_gather_strings(comm, mine.dump());

  std::string status;
  if (rank == 0) {
    try {
      Manifest manifest;
      manifest.world_size = comm.size();
      manifest.variables = plan.variables;
      manifest.user_metadata = options.metadata;
      bool any_per_rank = false;
      std::vector<nlohmann::json> per_rank;
      std::map<std::string, size_t> index;
      for (size_t i = 0; i < manifest.variables.size(); ++i) index[manifest.variables[i].path] = i;
      for (const auto& text : records) {
        auto r = nlohmann::json::parse(text);
        NNX_CHECK(!r.contains("error"), "rank {} could not write its shard: {}",
                  r["rank"].get<int>(), r["error"].get<std::string>());
        per_rank.push_back(r["per_rank"]);
        any_per_rank = any_per_rank || !r["per_rank"].is_null();
        if (!r.contains("file")) continue;
        const std::string file = r["file"]["name"];
        manifest.files.push_back({file, r["file"]["size"].get<uint64_t>()});
        for (const auto& c : r["chunks"]) {
          auto it = index.find(c["path"].get<std::string>());
          NNX_CHECK(it != index.end(),
                    "rank {} saved '{}', which rank 0's state does not have; every rank must save "
                    "the same paths",
                    r["rank"].get<int>(), c["path"].get<std::string>());
          manifest.variables[it->second].chunks.push_back(
              {file, c["path"], c["start"].get<std::vector<int64_t>>(),
               c["shape"].get<std::vector<int64_t>>(), c["offset"].get<uint64_t>(),
               c["nbytes"].get<uint64_t>(), c["crc32c"].get<uint32_t>()});
        }
      }
      if (any_per_rank) manifest.per_rank = per_rank;
      // Validate what we commit exactly as readers will.
      const std::string text = serialize_manifest(manifest);
      (void)parse_manifest(text, dir + "/manifest.json");
      write_file_atomically(dir + "/manifest.json", text);
    } catch (const std::exception& e) {
      status = fmt::format("the checkpoint in '{}' was not committed: {}", dir, e.what());
    }
  }
  status = broadcast_string(comm, status);
  if (!status.empty()) throw Error(status);
}

}  // namespace detail

void save(const std::string& dir, const State& state, const SaveOptions& options) {
  const Communicator world = Communicator::world();
  detail::check_save_options(world, options);
  auto plan = detail::plan_save_everywhere(world, state, false);
  detail::prepare_directory(world, dir, options.overwrite);
  detail::write_and_commit(world, dir, plan, options);
}

State combine(const std::vector<std::pair<std::string, State>>& parts) {
  State out;
  for (const auto& [prefix, state] : parts) {
    NNX_CHECK(!prefix.empty() && prefix.find('.') == std::string::npos,
              "prefix '{}' must be a non-empty name without dots", prefix);
    for (const auto& [path, v] : state) out.add(prefix + "." + path, v);
  }
  return out;
}

State part(const State& state, const std::string& prefix) {
  State out;
  const std::string head = prefix + ".";
  for (const auto& [path, v] : state)
    if (path.rfind(head, 0) == 0) out.add(path.substr(head.size()), v);
  NNX_CHECK(!out.empty() || state.empty(),
            "no path of the state starts with '{}' (a part that had no variables when combined "
            "leaves no path either: then take an empty State for it)", head);
  return out;
}

}  // namespace nnx::checkpoint

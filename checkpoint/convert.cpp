// export_safetensors and import_safetensors: between a sharded checkpoint and one plain
// safetensors file of whole tensors.
#include <nnx/checkpoint/crc32c.h>
#include <nnx/checkpoint/dtype.h>
#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/inspect.h>
#include <nnx/checkpoint/manifest.h>
#include <nnx/checkpoint/safetensors.h>
#include <nnx/checkpoint/detail/open_shard.h>
#include <nnx/core/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

namespace nnx::checkpoint {

namespace fs = std::filesystem;

namespace {

// Copies a dense block of `shape` at `start` into the dense whole array of `full` (row-major).
void place_block(const char* block, const std::vector<int64_t>& shape,
                 const std::vector<int64_t>& start, char* whole, const std::vector<int64_t>& full,
                 size_t elem) {
  const size_t nd = shape.size();
  if (nd == 0) {
    std::memcpy(whole, block, elem);
    return;
  }
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd - 1; d-- > 0;) stride[d] = stride[d + 1] * full[d + 1];
  const size_t row = static_cast<size_t>(shape[nd - 1]) * elem;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= shape[d];
  std::vector<int64_t> index(nd, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = start[nd - 1];
    for (size_t d = 0; d + 1 < nd; ++d) at += (start[d] + index[d]) * stride[d];
    std::memcpy(whole + at * elem, block + r * row, row);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  NNX_CHECK(fd >= 0, "cannot open '{}' to sync it: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  NNX_CHECK(rc == 0, "cannot sync '{}': {}", path, std::strerror(errno));
}

std::string renamed(const std::string& name, const Renames& renames) {
  for (const auto& [from, to] : renames)
    if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
  return name;
}

}  // namespace

// Whether `path` is `dir` or lies inside it (symlinks and '..' resolved; path need not exist).
bool inside(const fs::path& path, const fs::path& dir) {
  const fs::path p = fs::weakly_canonical(path), d = fs::weakly_canonical(dir);
  auto [d_end, p_it] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return d_end == d.end();
}

void export_safetensors(const std::string& dir, const std::string& file) {
  NNX_CHECK(!inside(file, dir), "'{}' lies inside the checkpoint '{}' being exported; write the "
            "export elsewhere", file, dir);
  const Manifest m = read_manifest(dir);
  std::vector<TensorLayout> layouts;
  for (const auto& v : m.variables) layouts.push_back({v.path, v.dtype, v.shape});
  const std::string partial = file + ".partial";
  SafetensorsWriter writer(partial, layouts, {{"format", "nnx-export"}});
  std::map<std::string, uint64_t> sizes;
  for (const auto& f : m.files) sizes[f.name] = f.size;
  std::map<std::string, std::unique_ptr<InputFile>> files;
  std::map<std::string, SafetensorsHeader> headers;
  // The shard of chunk `c` of `v`, opened once, after checking its size and that its own header
  // agrees with the manifest on the chunk's dtype, shape and bytes.
  auto shard_of = [&](const ChunkRecord& c, const VariableRecord& v) -> InputFile& {
    auto& in = files[c.file];
    if (!in) {
      const std::string path = dir + "/" + c.file;
      in = std::make_unique<InputFile>(detail::open_shard(path, v.path, "export"));
      NNX_CHECK(sizes.count(c.file) != 0 && in->size() == sizes[c.file],
                "'{}' has {} bytes but the manifest records {}: the file was truncated or "
                "replaced after the save, nothing was exported", path, in->size(), sizes[c.file]);
      headers[c.file] = read_safetensors_header(*in, in->path());
    }
    const TensorEntry& t = headers[c.file].at(c.key, in->path());
    NNX_CHECK(t.dtype == v.dtype && t.shape == c.shape &&
                  headers[c.file].data_start + t.begin == c.offset && t.end - t.begin == c.nbytes,
              "'{}': the manifest says {} ({}) at byte {} but '{}' holds tensor '{}' as {} ({}) "
              "at byte {}; the manifest or the shard was altered, nothing was exported", v.path,
              v.dtype, fmt::join(c.shape, ", "), c.offset, in->path(), c.key, t.dtype,
              fmt::join(t.shape, ", "), headers[c.file].data_start + t.begin);
    return *in;
  };
  std::vector<char> whole, chunk;
  for (const auto& v : m.variables) {
    // Every chunk is checked against its shard before the whole array is allocated.
    for (const auto& c : v.chunks) (void)shard_of(c, v);
    whole.assign(checked_nbytes(v.shape, v.dtype, v.path), 0);
    const size_t elem = dtype_size(v.dtype, v.path);
    for (const auto& c : v.chunks) {
      InputFile& in = shard_of(c, v);
      chunk.resize(c.nbytes);
      in.read_at(c.offset, chunk.data(), c.nbytes);
      NNX_CHECK(chunk_checksum(crc32c(chunk.data(), chunk.size()), c.start, c.shape, m.version) ==
                    c.crc32c,
                "'{}' in '{}': the chunk at [{}] fails its checksum; nothing was exported", v.path,
                in.path(), fmt::join(c.start, ", "));
      place_block(chunk.data(), c.shape, c.start, whole.data(), v.shape, elem);
    }
    writer.write(whole.data(), whole.size());
  }
  writer.finish();
  fs::rename(partial, file);
  fsync_directory(fs::absolute(file).parent_path().string());
}

void import_safetensors(const std::string& file, const std::string& dir, const Renames& renames) {
  InputFile source(file);
  const SafetensorsHeader header = read_safetensors_header(source, file);
  fs::create_directories(dir);
  NNX_CHECK(!fs::exists(dir + "/manifest.json"),
            "'{}' already holds a checkpoint; import into a new directory", dir);
  const std::string name = "rank-00000.safetensors";
  fs::copy_file(file, dir + "/" + name, fs::copy_options::overwrite_existing);
  fsync_file(dir + "/" + name);
  InputFile copy(dir + "/" + name);
  NNX_CHECK(copy.size() == source.size(), "copying '{}' into '{}' gave {} bytes of {}", file, dir,
            copy.size(), source.size());

  Manifest m;
  m.files.push_back({name, copy.size()});
  m.user_metadata = {{"imported_from", fs::path(file).filename().string()}};
  std::set<std::string> paths;
  for (const auto& t : header.tensors) {
    VariableRecord v;
    v.path = renamed(t.name, renames);
    NNX_CHECK(!v.path.empty() && paths.insert(v.path).second,
              "tensor '{}' of '{}' renames to '{}', which is empty or taken by another tensor; "
              "adjust the renames",
              t.name, file, v.path);
    v.kind = "Param";
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.metadata = {{"imported_name", t.name}};
    const uint64_t offset = header.data_start + t.begin, nbytes = t.end - t.begin;
    const std::vector<int64_t> origin(t.shape.size(), 0);
    v.chunks.push_back({name, t.name, origin, t.shape, offset, nbytes,
                        chunk_checksum(crc32c_of_range(copy, offset, nbytes), origin, t.shape)});
    m.variables.push_back(std::move(v));
  }
  const std::string text = serialize_manifest(m);
  (void)parse_manifest(text, dir + "/manifest.json");
  write_file_atomically(dir + "/manifest.json", text);
}

}  // namespace nnx::checkpoint

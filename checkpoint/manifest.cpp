// Manifest serialization and its validating parser: versions, file names, dtypes, shapes,
// specs against meshes, and chunks that must lie inside their files and tile their variable.
#include <nnx/checkpoint/crc32c.h>
#include <nnx/checkpoint/dtype.h>
#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/manifest.h>
#include <nnx/checkpoint/detail/parse_util.h>
#include <nnx/checkpoint/safetensors.h>
#include <nnx/checkpoint/detail/tiling.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <map>
#include <set>
#include <system_error>

namespace nnx::checkpoint {

uint32_t chunk_checksum(uint32_t bytes_crc, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& shape, int version) {
  if (version < 2) return bytes_crc;
  std::vector<int64_t> position{static_cast<int64_t>(start.size())};
  position.insert(position.end(), start.begin(), start.end());
  position.insert(position.end(), shape.begin(), shape.end());
  std::vector<unsigned char> bytes;
  for (int64_t v : position)
    for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * b)));
  return crc32c(bytes.data(), bytes.size(), bytes_crc);
}
namespace {

using detail::Json;
using detail::Where;
using detail::shape_text;
using OJson = nlohmann::ordered_json;

MeshRecord parse_mesh(const Json& j, const Where& where) {
  detail::check_keys(j, {"axis_names", "axis_sizes"}, where);
  const Json& names = detail::field(j, "axis_names", where);
  where.check(names.is_array() && names.size() <= kMaxRank,
              "mesh axis_names must be an array of at most {} strings, got {}", kMaxRank,
              detail::excerpt(names));
  MeshRecord mesh;
  for (const auto& n : names) {
    mesh.axis_names.push_back(detail::get_string(n, "each mesh axis name", where));
    const std::string& name = mesh.axis_names.back();
    where.check(!name.empty(), "mesh axis names must not be empty");
    where.check(std::count(mesh.axis_names.begin(), mesh.axis_names.end(), name) == 1,
                "mesh axis '{}' is named twice", detail::shorten(name));
  }
  mesh.axis_sizes = detail::get_int_list(detail::field(j, "axis_sizes", where), "mesh axis_sizes",
                                         kMaxRank, where);
  where.check(mesh.axis_sizes.size() == mesh.axis_names.size(),
              "mesh has {} axis names but {} axis sizes", mesh.axis_names.size(),
              mesh.axis_sizes.size());
  for (size_t a = 0; a < mesh.axis_sizes.size(); ++a)
    where.check(mesh.axis_sizes[a] >= 1, "mesh axis '{}' has size {}; sizes must be >= 1",
                detail::shorten(mesh.axis_names[a]), mesh.axis_sizes[a]);
  return mesh;
}

// spec: null, or one entry per dim: null, an axis name, or an array of axis names.
void check_spec(const Json& spec, size_t rank, const MeshRecord& mesh, const Where& where) {
  if (spec.is_null()) return;
  where.check(spec.is_array() && spec.size() == rank,
              "spec must be null or an array of {} entries (one per dim), got {}", rank,
              detail::excerpt(spec));
  std::set<std::string> used;
  auto use_axis = [&](const Json& axis, size_t dim) {
    where.check(axis.is_string(),
                "spec entry for dim {} must be null, an axis name or an array of axis names, "
                "got {}", dim, detail::excerpt(axis));
    const auto& name = axis.get_ref<const std::string&>();
    bool known =
        std::find(mesh.axis_names.begin(), mesh.axis_names.end(), name) != mesh.axis_names.end();
    where.check(known, "spec names mesh axis '{}' for dim {}, but the mesh has axes ({})",
                detail::shorten(name), dim, fmt::join(mesh.axis_names, ", "));
    where.check(used.insert(name).second, "spec uses mesh axis '{}' twice", name);
  };
  for (size_t d = 0; d < rank; ++d) {
    if (spec[d].is_array()) {
      for (const auto& axis : spec[d]) use_axis(axis, d);
    } else if (!spec[d].is_null()) {
      use_axis(spec[d], d);
    }
  }
}

ChunkRecord parse_chunk(const Json& j, const VariableRecord& var,
                        const std::map<std::string, uint64_t, std::less<>>& files,
                        const Where& where) {
  detail::check_keys(j, {"file", "key", "start", "shape", "offset", "nbytes", "crc32c"}, where);
  ChunkRecord c;
  c.file = detail::get_string(detail::field(j, "file", where), "file", where);
  auto file = files.find(c.file);
  if (file == files.end())
    where.fail(
        fmt::format("file '{}' is not listed in the manifest's files", detail::shorten(c.file)));
  c.key = detail::get_string(detail::field(j, "key", where), "key", where);
  c.start = detail::get_int_list(detail::field(j, "start", where), "start", kMaxRank, where);
  c.shape = detail::get_int_list(detail::field(j, "shape", where), "shape", kMaxRank, where);
  const size_t rank = var.shape.size();
  if (c.start.size() != rank || c.shape.size() != rank)
    where.fail(fmt::format("start {} and shape {} must have the variable's rank {}",
                           shape_text(c.start), shape_text(c.shape), rank));
  for (size_t d = 0; d < rank; ++d)
    if (c.start[d] < 0 || c.shape[d] < 0 || c.start[d] > var.shape[d] ||
        c.shape[d] > var.shape[d] - c.start[d])
      where.fail(
          fmt::format("block at start {} with shape {} does not lie inside the variable's "
                      "shape {} (dim {})",
                      shape_text(c.start), shape_text(c.shape), shape_text(var.shape), d));
  c.offset = detail::get_uint(detail::field(j, "offset", where), "offset", where);
  c.nbytes = detail::get_uint(detail::field(j, "nbytes", where), "nbytes", where);
  c.crc32c = static_cast<uint32_t>(
      detail::get_int(detail::field(j, "crc32c", where), "crc32c", 0, UINT32_MAX, where));
  uint64_t expected = checked_nbytes(c.shape, var.dtype, where.describe());
  if (c.nbytes != expected)
    where.fail(fmt::format("nbytes is {} but shape {} of {} needs {} bytes", c.nbytes,
                           shape_text(c.shape), var.dtype, expected));
  where.check(c.nbytes <= file->second && c.offset <= file->second - c.nbytes,
              "bytes [{}, {} + {}) lie outside file '{}' of {} bytes", c.offset, c.offset, c.nbytes,
              c.file, file->second);
  return c;
}

// The chunks must be pairwise disjoint and cover all numel elements.
void check_tiling(const VariableRecord& var, int64_t numel, const Where& where) {
  std::vector<detail::Block> blocks;
  uint64_t covered = 0;
  for (const auto& c : var.chunks) {
    blocks.push_back({&c.start, &c.shape});
    // Cannot overflow: a non-empty block lies inside a variable of at most 2^62 elements.
    int64_t n = std::find(c.shape.begin(), c.shape.end(), 0) != c.shape.end() ? 0 : 1;
    for (auto d : c.shape) n = n == 0 ? 0 : n * d;
    covered = std::min(covered + static_cast<uint64_t>(n), static_cast<uint64_t>(numel) + 1);
  }
  bool too_irregular = false;
  if (auto overlap = detail::find_overlap(blocks, &too_irregular)) {
    const auto& [i, j] = *overlap;
    const auto &a = var.chunks[i], &b = var.chunks[j];
    where.fail(fmt::format("chunk {} (start {}, shape {}) and chunk {} (start {}, shape {}) "
                           "overlap", i, shape_text(a.start), shape_text(a.shape), j,
                           shape_text(b.start), shape_text(b.shape)));
  }
  where.check(!too_irregular,
              "its {} chunks are too many and too irregular to check for overlap "
              "(over {} chunks whose boundaries cut more than {} cells per chunk); use a regular "
              "grid of chunks",
              var.chunks.size(), detail::kPairwiseMaxBlocks, detail::kGridCellsPerBlock);
  // Disjoint blocks inside the variable cannot hold more than numel elements.
  where.check(covered == uint64_t(numel),
              "its chunks cover {} of the {} elements of shape {}; every element needs exactly "
              "one chunk", covered, numel, shape_text(var.shape));
}

VariableRecord parse_variable(const Json& j,
                              const std::map<std::string, uint64_t, std::less<>>& files,
                              const Where& where) {
  detail::check_keys(j, {"path", "kind", "dtype", "shape", "spec", "mesh", "metadata", "chunks"},
                     where);
  VariableRecord v;
  v.path = detail::get_string(detail::field(j, "path", where), "path", where);
  where.check(!v.path.empty(), "variable path must not be empty");
  const Where at = where.at(fmt::format("variable '{}'", detail::shorten(v.path)));
  v.kind = detail::get_string(detail::field(j, "kind", at), "kind", at);
  at.check(!v.kind.empty(), "kind must not be empty");
  v.dtype = detail::get_string(detail::field(j, "dtype", at), "dtype", at);
  v.shape = detail::get_int_list(detail::field(j, "shape", at), "shape", kMaxRank, at);
  checked_nbytes(v.shape, v.dtype, at.describe());
  int64_t numel = checked_numel(v.shape, at.describe());
  if (j.contains("mesh")) v.mesh = parse_mesh(j["mesh"], at);
  if (j.contains("spec")) v.spec = j["spec"];
  check_spec(v.spec, v.shape.size(), v.mesh, at);
  if (j.contains("metadata")) {
    v.metadata = j["metadata"];
    at.check(v.metadata.is_object(), "metadata must be an object, got {}",
             detail::excerpt(v.metadata));
  }
  const Json& chunks = detail::field(j, "chunks", at);
  at.check(chunks.is_array() && chunks.size() <= kMaxChunksPerVariable,
           "chunks must be an array of at most {} chunks, got {}", kMaxChunksPerVariable,
           detail::excerpt(chunks));
  for (size_t i = 0; i < chunks.size(); ++i)
    v.chunks.push_back(
        parse_chunk(chunks[i], v, files,
                    at.at(fmt::format("variable '{}', chunk {}", detail::shorten(v.path), i))));
  check_tiling(v, numel, at);
  return v;
}

}  // namespace

const VariableRecord* Manifest::find(std::string_view path) const {
  for (const auto& v : variables)
    if (v.path == path) return &v;
  return nullptr;
}

const VariableRecord& Manifest::at(std::string_view path, std::string_view dir) const {
  if (const VariableRecord* v = find(path)) return *v;
  std::vector<std::string_view> paths;
  for (const auto& v : variables) paths.push_back(v.path);
  auto close = detail::close_names(paths, path);
  NNX_FAIL("variable '{}' is missing from the checkpoint in '{}' ({} variables){}",
           detail::shorten(path), dir, variables.size(),
           close.empty() ? "" : fmt::format("; close paths: {}", fmt::join(close, ", ")));
}

std::string serialize_manifest(const Manifest& m) {
  OJson files = OJson::array(), variables = OJson::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"size", f.size}});
  for (const auto& v : m.variables) {
    OJson chunks = OJson::array();
    for (const auto& c : v.chunks)
      chunks.push_back({{"file", c.file},
                        {"key", c.key},
                        {"start", c.start},
                        {"shape", c.shape},
                        {"offset", c.offset},
                        {"nbytes", c.nbytes},
                        {"crc32c", c.crc32c}});
    OJson mesh = {{"axis_names", v.mesh.axis_names}, {"axis_sizes", v.mesh.axis_sizes}};
    variables.push_back({{"path", v.path},
                         {"kind", v.kind},
                         {"dtype", v.dtype},
                         {"shape", v.shape},
                         {"spec", OJson(v.spec)},
                         {"mesh", mesh},
                         {"metadata", v.metadata.is_null() ? OJson::object() : OJson(v.metadata)},
                         {"chunks", chunks}});
  }
  OJson j = {
      {"format", "nnx-checkpoint"},
      {"version", m.version},
      {"world_size", m.world_size},
      {"files", files},
      {"variables", variables},
      {"per_rank", OJson(m.per_rank)},
      {"user_metadata", m.user_metadata.is_null() ? OJson::object() : OJson(m.user_metadata)}};
  try {
    return j.dump(1);
  } catch (const nlohmann::json::exception& e) {
    NNX_FAIL("the manifest cannot be written as JSON (paths, names and metadata must be UTF-8): {}",
             e.what());
  }
}

Manifest parse_manifest(std::string_view text, std::string_view file) {
  const Where where{__func__, file, ""};
  Json j = detail::parse_json(text, where);
  where.check(j.is_object(), "a manifest must be a JSON object, got {}", detail::excerpt(j));
  std::string format = detail::get_string(detail::field(j, "format", where), "format", where);
  where.check(format == "nnx-checkpoint",
              "format is '{}', expected 'nnx-checkpoint': this is not an nnx checkpoint manifest",
              detail::shorten(format));
  Manifest m;
  m.version = static_cast<int>(
      detail::get_int(detail::field(j, "version", where), "version", INT_MIN, INT_MAX, where));
  where.check(m.version >= kOldestManifestVersion && m.version <= kManifestVersion,
              "manifest version {}; this nnx reads versions {} to {}{}", m.version,
              kOldestManifestVersion, kManifestVersion,
              m.version > kManifestVersion ? " (the checkpoint was written by a newer nnx)" : "");
  detail::check_keys(
      j, {"format", "version", "world_size", "files", "variables", "per_rank", "user_metadata"},
      where);
  m.world_size = static_cast<int>(
      detail::get_int(detail::field(j, "world_size", where), "world_size", 1, INT_MAX, where));

  const Json& files = detail::field(j, "files", where);
  where.check(files.is_array(), "files must be an array, got {}", detail::excerpt(files));
  std::map<std::string, uint64_t, std::less<>> sizes;
  for (size_t i = 0; i < files.size(); ++i) {
    const Where at = where.at(fmt::format("files[{}]", i));
    detail::check_keys(files[i], {"name", "size"}, at);
    FileRecord f{detail::get_string(detail::field(files[i], "name", at), "name", at),
                 detail::get_uint(detail::field(files[i], "size", at), "size", at)};
    check_plain_file_name(f.name, at.describe());
    at.check(sizes.emplace(f.name, f.size).second, "file '{}' is listed twice", f.name);
    m.files.push_back(std::move(f));
  }

  const Json& variables = detail::field(j, "variables", where);
  where.check(variables.is_array(), "variables must be an array, got {}",
              detail::excerpt(variables));
  std::set<std::string> paths;
  for (size_t i = 0; i < variables.size(); ++i) {
    m.variables.push_back(
        parse_variable(variables[i], sizes, where.at(fmt::format("variables[{}]", i))));
    where.check(paths.insert(m.variables.back().path).second, "variable '{}' is listed twice",
                detail::shorten(m.variables.back().path));
  }

  if (j.contains("per_rank")) m.per_rank = j["per_rank"];
  where.check(m.per_rank.is_null() ||
                  (m.per_rank.is_array() && m.per_rank.size() == static_cast<size_t>(m.world_size)),
              "per_rank must be null or an array of world_size = {} entries, got {}", m.world_size,
              detail::excerpt(m.per_rank));
  if (j.contains("user_metadata")) m.user_metadata = j["user_metadata"];
  where.check(m.user_metadata.is_object(), "user_metadata must be an object, got {}",
              detail::excerpt(m.user_metadata));
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    NNX_CHECK(err != ENOENT || ::stat(dir.c_str(), &st) == 0,
              "checkpoint directory '{}' does not exist", dir);
    NNX_CHECK(err != ENOENT,
              "'{}' holds no committed checkpoint: it has no manifest.json (a save that did not "
              "finish, or the wrong path)", dir);
    NNX_FAIL("could not stat '{}': {}", path,
             std::error_code(err, std::generic_category()).message());
  }
  InputFile file(path);
  NNX_CHECK(file.size() <= kMaxManifestBytes,
            "'{}' has {} bytes, over the limit of {} bytes for a manifest", path, file.size(),
            kMaxManifestBytes);
  return parse_manifest(file.read_string(0, file.size()), path);
}

void check_chunk_in_header(const SafetensorsHeader& header, const ChunkRecord& chunk,
                           std::string_view dtype, std::string_view variable,
                           std::string_view file) {
  const TensorEntry& entry = header.at(chunk.key, file);
  const uint64_t offset = header.data_start + entry.begin;
  NNX_CHECK(entry.dtype == dtype && entry.shape == chunk.shape && offset == chunk.offset &&
                entry.end - entry.begin == chunk.nbytes,
            "'{}': '{}' holds '{}' as {}[{}] at byte {} but the manifest records {}[{}] at byte "
            "{}; the file does not belong to this manifest",
            variable, file, chunk.key, entry.dtype, fmt::join(entry.shape, ", "), offset, dtype,
            fmt::join(chunk.shape, ", "), chunk.offset);
}

}  // namespace nnx::checkpoint

// describe and verify: a checkpoint's tree, and a full read of its files against the manifest.
#include <nnx/checkpoint/dtype.h>
#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/inspect.h>
#include <nnx/checkpoint/manifest.h>
#include <nnx/checkpoint/safetensors.h>
#include <nnx/core/error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <optional>

namespace nnx::checkpoint {

namespace {

std::string spec_text(const VariableRecord& v) {
  if (v.mesh.axis_names.empty()) return "whole";
  std::vector<std::string> axes;
  for (size_t i = 0; i < v.mesh.axis_names.size(); ++i)
    axes.push_back(fmt::format("'{}': {}", v.mesh.axis_names[i], v.mesh.axis_sizes[i]));
  return fmt::format("{} on Mesh({})", v.spec.dump(), fmt::join(axes, ", "));
}

uint64_t record_bytes(const VariableRecord& v) {
  return checked_nbytes(v.shape, v.dtype, v.path);
}

}  // namespace

std::string describe(const std::string& dir) {
  const Manifest m = read_manifest(dir);
  uint64_t total = 0;
  for (const auto& f : m.files) total += f.size;
  std::string out = fmt::format("{}: version {}, saved by {} rank(s), {} file(s), {} bytes\n",
                                dir, m.version, m.world_size, m.files.size(), total);
  size_t width = 4;
  for (const auto& v : m.variables) width = std::max(width, v.path.size());
  for (const auto& v : m.variables)
    out += fmt::format("{:<{}}  {:<10} {:<5} [{}]  {}  {} bytes, {} chunk(s)\n", v.path, width,
                       v.kind, v.dtype, fmt::join(v.shape, ", "), spec_text(v), record_bytes(v),
                       v.chunks.size());
  if (!m.per_rank.is_null()) out += fmt::format("per-rank state for {} ranks\n", m.world_size);
  return out;
}

VerifyReport verify(const std::string& dir) {
  VerifyReport report;
  std::optional<Manifest> manifest;
  try {
    manifest = read_manifest(dir);
  } catch (const std::exception& e) {
    report.problems.push_back(e.what());
    return report;
  }
  // Every file: present, the recorded size, a valid safetensors header.
  std::map<std::string, std::unique_ptr<InputFile>> files;
  std::map<std::string, SafetensorsHeader> headers;
  for (const auto& f : manifest->files) {
    try {
      auto file = std::make_unique<InputFile>(dir + "/" + f.name);
      NNX_CHECK(file->size() == f.size, "'{}' has {} bytes but the manifest records {}",
                file->path(), file->size(), f.size);
      headers[f.name] = read_safetensors_header(*file, file->path());
      files[f.name] = std::move(file);
    } catch (const std::exception& e) {
      report.problems.push_back(e.what());
    }
  }
  // Every chunk: where the header says, with its checksum.
  for (const auto& v : manifest->variables) {
    ++report.variables;
    for (const auto& c : v.chunks) {
      ++report.chunks;
      auto it = files.find(c.file);
      if (it == files.end()) continue;  // already reported
      try {
        check_chunk_in_header(headers[c.file], c, v.dtype, v.path, it->second->path());
        const uint32_t crc = chunk_checksum(crc32c_of_range(*it->second, c.offset, c.nbytes),
                                            c.start, c.shape, manifest->version);
        NNX_CHECK(crc == c.crc32c,
                  "'{}' in '{}': the chunk at [{}] fails its checksum (crc32c {:08x}, manifest "
                  "{:08x})",
                  v.path, it->second->path(), fmt::join(c.start, ", "), crc, c.crc32c);
        report.bytes += static_cast<int64_t>(c.nbytes);
      } catch (const std::exception& e) {
        report.problems.push_back(e.what());
      }
    }
  }
  return report;
}

}  // namespace nnx::checkpoint

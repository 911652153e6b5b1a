// checkpoint::restore: each rank reads the chunks that overlap its blocks, checking every one
// against its checksum: a chunk it needs whole goes straight into place; of a chunk it needs in
// part, it streams the whole chunk through a small buffer (verified, bounded memory) and keeps
// its part. With verify_all_checksums = false, it reads only the byte runs of its part, unchecked.
#include <nnx/checkpoint/crc32c.h>
#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/safetensors.h>
#include <nnx/checkpoint/detail/open_shard.h>
#include <nnx/checkpoint/detail/save_plan.h>
#include <nnx/core/error.h>
#include <nnx/sharding/spec_check.h>
#include <nnx/framework/state_sharding.h>
#include <nnx/sharding/world.h>

#include <torch/types.h>

#include <map>
#include <string_view>
#include <unordered_map>

namespace nnx::checkpoint {

namespace {

// The shard files of one checkpoint, opened on first use; sizes checked against the manifest.
class ShardFiles {
 public:
  ShardFiles(std::string dir, const Manifest& manifest)
      : dir_(std::move(dir)), version_(manifest.version) {
    for (const auto& f : manifest.files) sizes_[f.name] = f.size;
  }
  int manifest_version() const { return version_; }
  // The file of `chunk` of `variable`, after checking its size and that its safetensors header
  // places the chunk where the manifest says.
  const InputFile& open(const ChunkRecord& chunk, const VariableRecord& variable) {
    auto it = files_.find(chunk.file);
    if (it == files_.end()) {
      InputFile file = detail::open_shard(dir_ + "/" + chunk.file, variable.path, "restore");
      NNX_CHECK(file.size() == sizes_.at(chunk.file),
                "'{}' has {} bytes but the manifest records {}: the file was truncated or "
                "replaced after the save",
                file.path(), file.size(), sizes_.at(chunk.file));
      auto header = read_safetensors_header(file, file.path());
      it = files_.emplace(chunk.file, Opened{std::move(file), std::move(header)}).first;
    }
    const auto& [file, header] = it->second;
    check_chunk_in_header(header, chunk, variable.dtype, variable.path, file.path());
    return file;
  }

 private:
  struct Opened {
    InputFile file;
    SafetensorsHeader header;
  };
  std::string dir_;
  int version_;
  std::map<std::string, uint64_t> sizes_;
  std::map<std::string, Opened> files_;
};

// The overlap of two boxes; empty when any extent is zero.
Box box_intersection(const Box& a, const Box& b) {
  Box out{a.start, a.size};
  for (size_t d = 0; d < a.start.size(); ++d) {
    int64_t lo = std::max(a.start[d], b.start[d]);
    int64_t hi = std::min(a.start[d] + a.size[d], b.start[d] + b.size[d]);
    out.start[d] = lo;
    out.size[d] = std::max<int64_t>(0, hi - lo);
  }
  return out;
}

// The last dim that `region` covers only partly in `chunk` or in `dst_box`: a run spans the
// dims after it, contiguous in both (-1: the region is one run).
int64_t run_dim(const ChunkRecord& chunk, const Box& region, const Box& dst_box) {
  int64_t k = static_cast<int64_t>(chunk.shape.size()) - 1;
  while (k >= 0 && region.size[k] == chunk.shape[k] && region.size[k] == dst_box.size[k]) --k;
  return k;
}

// Reads the part `region` of `chunk` into `dst` (row-major, covering `dst_box`), run by run in
// the chunk's order, each run one read straight into place; returns the CRC-32C of the bytes.
uint32_t read_region(const InputFile& file, const ChunkRecord& chunk, const Box& region,
                     at::Tensor& dst, const Box& dst_box) {
  const int64_t nd = static_cast<int64_t>(chunk.shape.size());
  const int64_t elem = dst.element_size();
  const int64_t k = run_dim(chunk, region, dst_box);
  std::vector<int64_t> stride(nd, 1), dst_stride(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) {
    stride[d] = stride[d + 1] * chunk.shape[d + 1];
    dst_stride[d] = dst_stride[d + 1] * dst_box.size[d + 1];
  }
  const int64_t run = k < 0 ? numel(chunk.shape) : region.size[k] * stride[k];
  const int64_t runs = k <= 0 ? 1 : numel(Shape(region.size.begin(), region.size.begin() + k));
  auto* out = static_cast<char*>(dst.data_ptr());
  std::vector<int64_t> index(std::max<int64_t>(k, 0), 0);
  uint32_t crc = 0;
  for (int64_t r = 0; r < runs; ++r) {
    int64_t source = 0, target = 0;
    for (int64_t d = 0; d < nd && d <= k; ++d) {
      const int64_t i = d < k ? index[d] : 0;
      source += (region.start[d] - chunk.start[d] + i) * stride[d];
      target += (region.start[d] - dst_box.start[d] + i) * dst_stride[d];
    }
    char* at = out + target * elem;
    file.read_at(chunk.offset + static_cast<uint64_t>(source * elem), at,
                 static_cast<uint64_t>(run * elem));
    crc = crc32c(at, static_cast<size_t>(run * elem), crc);
    io_counts().bytes_read += run * elem;
    for (int64_t d = k - 1; d >= 0; --d) {  // next index over dims [0, k), row-major
      if (++index[d] < region.size[d]) break;
      index[d] = 0;
    }
  }
  return crc;
}

// Reads the whole of `chunk` in slabs of dim-0 rows (about 16 MiB each, at least one row),
// copies the part `region` into `dst` (covering `dst_box`) and returns the CRC-32C of all the
// chunk's bytes: a partly needed chunk is checked without holding it whole.
uint32_t read_verified_part(const InputFile& file, const ChunkRecord& chunk, const Box& region,
                            at::Tensor& dst, const Box& dst_box) {
  constexpr int64_t kSlabBytes = 16 << 20;
  const int64_t rows = chunk.shape.empty() ? 1 : chunk.shape[0];
  const int64_t row_bytes = rows == 0 ? 0 : static_cast<int64_t>(chunk.nbytes) / rows;
  const int64_t per_slab = std::max<int64_t>(1, row_bytes == 0 ? rows : kSlabBytes / row_bytes);
  uint32_t crc = 0;
  for (int64_t first = 0; first < rows; first += per_slab) {
    const int64_t count = std::min(per_slab, rows - first);
    Box slab{chunk.start, chunk.shape};
    if (!slab.size.empty()) {
      slab.start[0] += first;
      slab.size[0] = count;
    }
    at::Tensor buffer = torch::empty(slab.size, dst.options());
    file.read_at(chunk.offset + static_cast<uint64_t>(first * row_bytes), buffer.data_ptr(),
                 static_cast<uint64_t>(count * row_bytes));
    crc = crc32c(buffer.data_ptr(), static_cast<size_t>(count * row_bytes), crc);
    io_counts().bytes_read += count * row_bytes;
    const Box keep = box_intersection(slab, region);
    if (keep.numel() == 0) continue;
    Box in_slab{keep.start, keep.size}, in_dst{keep.start, keep.size};
    for (size_t d = 0; d < keep.start.size(); ++d) {
      in_slab.start[d] -= slab.start[d];
      in_dst.start[d] -= dst_box.start[d];
    }
    slice(dst, in_dst).copy_(slice(buffer, in_slab));
  }
  return crc;
}

// The layout the restored variable takes: the target's own sharding, else its metadata's spec
// on options.mesh, else the whole array.
std::pair<std::shared_ptr<const Mesh>, PartitionSpec> target_layout(const std::string& path,
                                                                    const Variable& v,
                                                                    const RestoreOptions& options) {
  const Array& value = v.value();
  const size_t rank = value.shape().size();
  std::shared_ptr<const Mesh> mesh = value.mesh() ? value.mesh() : options.mesh;
  if (!mesh) return {nullptr, pad_spec(P(), rank)};
  NNX_CHECK(mesh->is_bound(),
            "'{}' targets {}, a description only; restore onto a mesh made by nnx::make_mesh",
            path, mesh->to_string());
  if (value.mesh()) return {mesh, pad_spec(value.spec(), rank)};
  return {mesh, checked_partition_spec(v.metadata(), value.shape(), *mesh, "'" + path + "'")};
}

Array restore_one(const std::string& dir, const std::string& path, const Variable& v,
                  const VariableRecord& record, ShardFiles& files, const RestoreOptions& options) {
  const Array& target = v.value();
  const std::string what = fmt::format("'{}' in '{}'", path, dir);
  NNX_CHECK(record.shape == target.shape(),
            "{} has shape {} but the target has shape {}; restore into a model of the saved shape",
            what, to_string(record.shape), to_string(target.shape()));
  const at::ScalarType saved = detail::torch_dtype(record.dtype, what);
  const at::ScalarType wanted = target.dtype();
  NNX_CHECK(saved == wanted || (at::isFloatingType(saved) && at::isFloatingType(wanted)),
            "{} is saved as {} but the target is {}; only floating types convert on restore", what,
            dtype_name(saved), dtype_name(wanted));
  auto [mesh, spec] = target_layout(path, v, options);
  const Box box = mesh ? block_of(target.shape(), spec, *mesh, mesh->coordinates())
                       : Box::whole(target.shape());
  at::Tensor local = torch::empty(box.size, torch::TensorOptions().dtype(saved));
  int64_t covered = 0;
  for (const auto& chunk : record.chunks) {
    const Box chunk_box{chunk.start, chunk.shape};
    const Box region = box_intersection(chunk_box, box);
    if (region.numel() == 0) continue;
    const InputFile& file = files.open(chunk, record);
    const bool whole = region == chunk_box || options.verify_all_checksums;
    uint32_t crc = 0;
    if (region == chunk_box || !whole) crc = read_region(file, chunk, region, local, box);
    else crc = read_verified_part(file, chunk, region, local, box);
    if (whole) {
      crc = chunk_checksum(crc, chunk.start, chunk.shape, files.manifest_version());
      NNX_CHECK(crc == chunk.crc32c,
                "{}: the chunk at {} in '{}' fails its checksum (crc32c {:08x}, manifest {:08x}); "
                "the file is corrupt: restore an earlier checkpoint",
                what, to_string(chunk.start), chunk.file, crc, chunk.crc32c);
      ++io_counts().chunks_verified;
    }
    covered += region.numel();
  }
  NNX_CHECK(covered == box.numel(), "{}: the chunks cover {} of the {} elements this rank needs",
            what, covered, box.numel());
  if (wanted != saved) local = local.to(wanted);
  // Only this rank's block travels to the device: the mesh's, else a concrete target's own.
  const at::Device device = mesh                  ? mesh->device()
                            : target.is_abstract() ? at::Device(at::kCPU)
                                                   : target.local().device();
  if (!device.is_cpu()) local = local.to(device);
  if (!mesh) return Array(local);
  return Array::from_local(local, target.shape(), {mesh, spec});
}

}  // namespace

State restore(const std::string& dir, const State& target, const RestoreOptions& options) {
  // Each rank reads its own blocks; a failure on any rank fails the restore on every rank, so
  // that no rank carries on with a state the others could not restore.
  State out;
  std::string error;
  try {
    const Manifest manifest = read_manifest(dir);
    ShardFiles files(dir, manifest);
    std::unordered_map<std::string_view, const VariableRecord*> by_path;
    for (const auto& record : manifest.variables) by_path[record.path] = &record;
    for (const auto& [path, v] : target) {
      auto it = by_path.find(path);
      const VariableRecord& record = it != by_path.end() ? *it->second : manifest.at(path, dir);
      out.add(path,
              nnx::detail::variable_like(v, restore_one(dir, path, v, record, files, options)));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  detail::raise_if_any_failed(Communicator::world(), error);
  return out;
}

nlohmann::json restore_per_rank(const std::string& dir) {
  const Manifest manifest = read_manifest(dir);
  NNX_CHECK(!manifest.per_rank.is_null(), "the checkpoint in '{}' holds no per-rank state", dir);
  NNX_CHECK(manifest.world_size == world_size(),
            "the per-rank state in '{}' was saved by {} ranks but this run has {}; it cannot be "
            "resharded: run with mpirun -np {}, or start that state afresh",
            dir, manifest.world_size, world_size(), manifest.world_size);
  return manifest.per_rank.at(world_rank());
}

nlohmann::json read_metadata(const std::string& dir) { return read_manifest(dir).user_metadata; }

}  // namespace nnx::checkpoint

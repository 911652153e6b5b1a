// Array construction, placements and blocks.
#include <nnx/sharding/array.h>
#include <nnx/sharding/lazy_array.h>
#include <nnx/core/error.h>
#include <nnx/sharding/detail/hash_mix.h>
#include <nnx/sharding/detail/whole_layout.h>
#include <nnx/sharding/spec_check.h>

#include <torch/types.h>

#include <algorithm>
#include <array>
#include <functional>

namespace nnx {

std::string Placement::to_string() const {
  switch (kind) {
    case Kind::replicate: return "R";
    case Kind::shard: return fmt::format("S({})", dim);
    case Kind::partial: return "P";
  }
  return "?";
}

namespace {

// The number of blocks dim d is split into: the product of its mesh axes' sizes.
int64_t ways_of(const PartitionSpec& spec, size_t d, const Mesh& mesh) {
  int64_t ways = 1;
  if (d < spec.size())
    for (const auto& a : spec[d].names()) ways *= mesh.shape()[mesh.axis_index(a)];
  return ways;
}

// Whether `sizes` is the block shape `spec` lays out (block_of's sizes, with no allocation).
// Specs split dims evenly (check_spec), so a block is 1/ways of its dim: a product, not a
// division, checks it.
bool is_block_shape(at::IntArrayRef sizes, const Shape& shape, const PartitionSpec& spec,
                    const Mesh& mesh) {
  if (sizes.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (sizes[d] * ways_of(spec, d, mesh) != shape[d]) return false;
  return true;
}

}  // namespace

namespace {
uint64_t mix_axes(uint64_t h, const std::vector<std::string>& axes) {
  h = detail::hash_mix(h, axes.size());
  for (const auto& axis : axes) h = detail::hash_mix(h, std::hash<std::string>{}(axis));
  return h;
}
}  // namespace

ArrayLayout::ArrayLayout(Shape shape, PartitionSpec spec, std::vector<std::string> partial_axes)
    : shape_(std::move(shape)), spec_(std::move(spec)), partial_axes_(std::move(partial_axes)) {
  uint64_t h = detail::hash_mix(detail::kHashSeed, shape_.size());
  for (int64_t n : shape_) h = detail::hash_mix(h, static_cast<uint64_t>(n));
  const auto& entries = spec_.entries();
  for (size_t d = 0; d < shape_.size(); ++d)
    h = mix_axes(h, d < entries.size() ? entries[d].names() : std::vector<std::string>{});
  hash_ = mix_axes(h, partial_axes_);
  whole_ = partial_axes_.empty() &&
           std::all_of(entries.begin(), entries.end(), [](const auto& e) { return e.is_none(); });
}

ArrayLayout::ArrayLayout() : ArrayLayout({}, PartitionSpec(), {}) {}

const std::shared_ptr<const ArrayLayout>& Array::empty_layout() {
  static const auto empty = std::make_shared<const ArrayLayout>();
  return empty;
}

std::shared_ptr<const ArrayLayout> detail::whole_layout(at::IntArrayRef sizes) {
  constexpr size_t kKept = 8;
  thread_local std::array<std::shared_ptr<const ArrayLayout>, kKept> kept;
  thread_local size_t next = 0;
  for (const auto& layout : kept)
    if (layout && sizes.equals(layout->shape())) return layout;
  PartitionSpec whole(std::vector<SpecEntry>(sizes.size()));  // every dim whole
  auto& slot = kept[next++ % kKept];
  slot = std::make_shared<const ArrayLayout>(sizes.vec(), std::move(whole),
                                             std::vector<std::string>{});
  return slot;
}

Array::Array(at::Tensor full)
    : local_(std::move(full)),
      layout_(local_.defined() ? detail::whole_layout(local_.sizes()) : empty_layout()) {}

Array Array::abstract(const Shape& shape, at::ScalarType dtype) {
  return Array(torch::empty(shape, torch::TensorOptions().dtype(dtype).device(torch::kMeta)));
}

Array Array::abstract(std::shared_ptr<const LazyArray> init) {
  NNX_CHECK(init != nullptr, "no initializer given");
  Array out = abstract(init->shape, init->dtype);
  out.init_ = std::move(init);
  return out;
}

Array Array::from_local(at::Tensor local, Shape global_shape, NamedSharding sharding,
                        std::vector<std::string> partial_axes) {
  NNX_CHECK(sharding.mesh != nullptr, "a sharded Array needs a mesh");
  auto spec = sharding.spec.size() < global_shape.size()
                  ? pad_spec(sharding.spec, global_shape.size())
                  : std::move(sharding.spec);
  check_spec(spec, global_shape, *sharding.mesh, "Array::from_local");
  if (!partial_axes.empty()) {
    const auto sharded_axes = spec.axis_names();
    for (const auto& a : partial_axes) {
      sharding.mesh->axis_index(a);
      NNX_CHECK(std::count(partial_axes.begin(), partial_axes.end(), a) == 1 &&
                    std::find(sharded_axes.begin(), sharded_axes.end(), a) == sharded_axes.end(),
                "axis '{}' cannot be both partial and sharding a dim, or partial twice", a);
    }
  }
  return from_layout(std::move(local), std::move(sharding.mesh),
                     std::make_shared<const ArrayLayout>(std::move(global_shape), std::move(spec),
                                                         std::move(partial_axes)));
}

Array Array::from_layout(at::Tensor local, std::shared_ptr<const Mesh> mesh,
                         std::shared_ptr<const ArrayLayout> layout) {
  NNX_CHECK(mesh != nullptr && layout != nullptr, "a sharded Array needs a mesh and a layout");
  if (local.defined() && !local.is_meta() && mesh->is_bound() &&
      !is_block_shape(local.sizes(), layout->shape(), layout->spec(), *mesh)) {
    const Array laid_out(at::Tensor(), layout, mesh);
    NNX_FAIL("local block of shape {} given where {} lays out blocks of shape {} (global {})",
             to_string(local.sizes().vec()), layout->spec().to_string(),
             to_string(laid_out.local_box().size), to_string(layout->shape()));
  }
  return Array(std::move(local), std::move(layout), std::move(mesh));
}

bool Array::is_abstract() const { return local_.defined() && local_.is_meta(); }

at::ScalarType Array::dtype() const {
  NNX_CHECK(local_.defined(), "the array is empty (a variable that was popped or never set)");
  return local_.scalar_type();
}

std::optional<NamedSharding> Array::sharding() const {
  if (!mesh_) return std::nullopt;
  return NamedSharding{mesh_, spec()};
}

void Array::set_sharding(std::optional<NamedSharding> sharding) {
  // A concrete array's block would stay as it is under the new layout: its values move only
  // through device_put or redistribute.
  NNX_CHECK(!defined() || is_abstract(),
            "set_sharding lays out abstract arrays only, and this {} array holds values; place "
            "them with device_put(x.local(), sharding), or move them with redistribute",
            to_string(shape()));
  NNX_CHECK(!sharding || sharding->mesh != nullptr,
            "the sharding names no mesh (null); pass a mesh, such as nnx::current_mesh() inside "
            "a MeshContext");
  if (!sharding) {
    mesh_.reset();
    layout_ = std::make_shared<const ArrayLayout>(shape(), pad_spec(P(), shape().size()),
                                                  std::vector<std::string>{});
    return;
  }
  auto spec = pad_spec(sharding->spec, shape().size());
  check_spec(spec, shape(), *sharding->mesh, "Array::set_sharding");
  mesh_ = std::move(sharding->mesh);
  layout_ = std::make_shared<const ArrayLayout>(shape(), std::move(spec), partial_axes());
}

std::vector<Placement> Array::placements() const {
  if (!mesh_) return {};
  std::vector<Placement> out(mesh_->ndim());
  for (size_t d = 0; d < spec().size(); ++d)
    for (const auto& a : spec()[d].names()) out[mesh_->axis_index(a)] = Placement::Shard(d);
  for (const auto& a : partial_axes()) out[mesh_->axis_index(a)] = Placement::Partial();
  return out;
}

bool Array::is_fully_replicated() const { return !mesh_ || layout_->whole(); }

Box Array::local_box() const {
  if (!mesh_) return Box::whole(shape());
  return block_of(shape(), spec(), *mesh_, mesh_->coordinates());
}

Array Array::with_local(at::Tensor local) const {
  // Built afresh, not copied: this array's own tensor is never taken and released.
  Array out(std::move(local), layout_, mesh_);
  if (out.is_abstract()) out.init_ = init_;
  return out;
}

at::Tensor slice(const at::Tensor& full, const Box& box) {
  check_box_inside(box, full.sizes().vec(), "slice");
  at::Tensor out = full;
  for (size_t d = 0; d < box.size.size(); ++d)
    out = out.narrow(static_cast<int64_t>(d), box.start[d], box.size[d]);
  return out;
}

Box block_of(const Shape& shape, const PartitionSpec& spec, const Mesh& mesh,
             const std::vector<int64_t>& coordinates) {
  Box box = Box::whole(shape);
  for (size_t d = 0; d < spec.size() && d < shape.size(); ++d) {
    int64_t index = 0;
    for (const auto& a : spec[d].names()) {
      int64_t axis = mesh.axis_index(a);
      index = index * mesh.shape()[axis] + coordinates[axis];
    }
    box.size[d] = shape[d] / ways_of(spec, d, mesh);
    box.start[d] = index * box.size[d];
  }
  return box;
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(dtype);
  }
}

}  // namespace nnx

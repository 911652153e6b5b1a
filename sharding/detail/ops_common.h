// Shared machinery of the op rules: meshes of the inputs, layouts as axes per dim, relayout
// through redistribute, and building outputs.
#pragma once

#include <source_location>

#include <nnx/sharding/array.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/detail/plan_cache.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nnx::detail {

using DimAxes = std::vector<Axes>;  // mesh axes per dim, major first

// The mesh the inputs share (null when none has one); two different meshes are an error. The
// reference is to an input's own mesh pointer, so it lives as long as that input does, unchanged.
const std::shared_ptr<const Mesh>& common_mesh(const std::vector<const Array*>& arrays,
                                               const char* op);
const std::shared_ptr<const Mesh>& common_mesh(std::initializer_list<const Array*> arrays,
                                               const char* op);
// A plain array becomes a replicated array on `mesh`.
Array on_mesh(const Array& a, const std::shared_ptr<const Mesh>& mesh);
// The same without copying `a` when it lies on a mesh already; a new array is kept in `held`.
const Array& on_mesh(const Array& a, const std::shared_ptr<const Mesh>& mesh,
                     std::optional<Array>& held);
// a's block for an op on `mesh`: a plain array's tensor moves to the mesh's device (a host
// array beside GPU blocks); on_mesh moves it the same way.
at::Tensor local_on_mesh(const Array& a, const std::shared_ptr<const Mesh>& mesh);
DimAxes dims_of(const Array& a);
// The array's layout as data, for the planners of op_plan.h.
Layout layout_of(const Array& a);
// `a` laid out as dims/partial (redistributes only when different).
// `op` (the caller, by default) labels the redistribution in NNX_LOG_REDISTRIBUTE's log.
Array relayout(const Array& a, const DimAxes& dims, const Axes& partial,
               std::source_location op = std::source_location::current());
// The result of a planned op: `local` laid out as the plan's output (its layout, shared).
Array planned_result(at::Tensor local, const std::shared_ptr<const Mesh>& mesh,
                     const PlannedOp& planned);
// The block of input `i` of `planned` laid out as the plan's target: a's own where the plan
// moves nothing (no copy), else a new one kept in `held`. Inputs that only move on this rank
// run the plan's steps directly.
const at::Tensor& planned_local(const Array& a, const PlannedOp& planned, size_t i,
                                std::optional<at::Tensor>& held,
                                std::source_location op = std::source_location::current());
// The same layout without pending sums (all_reduce where needed).
Array resolved(const Array& a, std::source_location op = std::source_location::current());
// `a` with dim d whole and no pending sums; gathering a sharded d counts a fallback.
Array whole_dim(const Array& a, int64_t d);
Array make_result(at::Tensor local, Shape shape, const std::shared_ptr<const Mesh>& mesh,
                  const DimAxes& dims, const Axes& partial);
// Whether no input splits a dim or holds a pending sum (plain inputs count as replicated).
// Every rule then gives a replicated result with no communication, so ops skip the rule.
bool all_replicated(std::initializer_list<const Array*> arrays);
// `local` (the whole value) replicated on `mesh`, laid out as make_result would lay it out. An
// input `like` of the same shape, replicated on `mesh`, lends its layout (no allocation).
Array replicated_result(at::Tensor local, const std::shared_ptr<const Mesh>& mesh,
                        std::initializer_list<const Array*> like = {});
Axes without(const Axes& axes, const Axes& remove);
Axes used_axes(const DimAxes& dims);
std::string shape_str(const Array& a);
// Throws, naming `op`, unless predictions and targets have one shape: a loss that broadcast
// [N, 1] against [N] would silently average an [N, N] matrix (optax refuses, PyTorch warns).
void check_same_shape(const Array& predictions, const Array& targets, const char* op);

}  // namespace nnx::detail

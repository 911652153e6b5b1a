// Sharded initialization (design.md §5): each process computes only its own block of each
// variable, straight from the partitionable RNG, so values are the same on every mesh.
//   auto model = nnx::eval_shape([&] { return Model(rngs); });   // no storage
//   nnx::materialize(model, mesh);                               // local blocks only
#pragma once

#include <nnx/framework/materialize.h>
#include <nnx/framework/module.h>
#include <nnx/framework/state.h>
#include <nnx/sharding/mesh.h>

#include <memory>
#include <string>

namespace nnx {

// The array `init` describes laid out on `mesh` by its metadata's spec (logical names resolved
// through its sharding_rules and the active LogicalAxisRules); only this process's block is
// computed. A null mesh gives the whole array. `what` names the array in errors.
Array materialize_on(const LazyArray& init, const std::shared_ptr<const Mesh>& mesh,
                     const std::string& what);

// Every abstract variable (from eval_shape) computes its block on `mesh`; concrete variables on
// no mesh are placed by slicing; variables already on `mesh` in another layout than their spec
// are redistributed to it (collective). Errors name the variable path. A null mesh: whole arrays
// (variables on a mesh are gathered, collective over it).
void materialize(State& state, const std::shared_ptr<const Mesh>& mesh);
void materialize(Module& model, const std::shared_ptr<const Mesh>& mesh);

}  // namespace nnx

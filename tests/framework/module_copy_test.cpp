// Copies of modules: slicing, derived types, optional and shared_ptr fields, shared submodules,
// stateless modules (inside a Sequential too), cycles, and the storage rules of update, merge
// and clone.
#include "../catch_after_torch.h"

#include "test_modules.h"

using namespace nnx_test;
using Catch::Matchers::Contains;

namespace {
struct Base : nnx::Module {
  nnx::Param NNX_FIELD(a);
  Base() : a(torch::ones({2})) {}
};
struct Derived : Base {
  nnx::Param NNX_FIELD(b);
  Derived() : b(torch::full({3}, 2.0)) {}
};
struct MoreDerived : Derived {
  nnx::BatchStat NNX_FIELD(c);
  MoreDerived() : c(torch::zeros({1})) {}
};
struct Identity : nnx::Module {};  // stateless: no fields at all
struct Holder : nnx::Module {
  std::optional<Dense> NNX_FIELD(maybe);
  std::shared_ptr<Dense> NNX_FIELD(left);
  std::shared_ptr<Dense> NNX_FIELD(right);  // the same module as left
  Identity NNX_FIELD(identity);
  nnx::Param NNX_FIELD(scale_);             // trailing underscore: path "scale"
  explicit Holder(nnx::Rngs& rngs)
      : maybe(Dense(2, 2, rngs)), left(std::make_shared<Dense>(2, 3, rngs)), right(left),
        scale_(torch::ones({1})) {}
};
}  // namespace

TEST_CASE("a sliced copy knows only the fields of its own type") {
  Derived d;
  Base sliced = d;
  CHECK(nnx::state(sliced).paths() == std::vector<std::string>{"a"});
  std::vector<Base> many(3, sliced);
  for (auto& m : many) CHECK(nnx::state(m).paths() == std::vector<std::string>{"a"});
  const Base& ref = d;
  auto [graphdef, state] = nnx::split(ref);  // the GraphDef holds the whole Derived
  CHECK(state.paths() == std::vector<std::string>{"a", "b"});
  Base merged = nnx::merge(graphdef, state);  // asking for a Base slices safely
  CHECK(nnx::state(merged).paths() == std::vector<std::string>{"a"});
}

TEST_CASE("derived-of-derived modules list base fields first and round-trip") {
  MoreDerived m;
  CHECK(nnx::state(m).paths() == std::vector<std::string>{"a", "b", "c"});
  auto [graphdef, params, rest] = nnx::split(m, nnx::OfType<nnx::Param>, nnx::Everything);
  MoreDerived back = nnx::merge(graphdef, params, rest);
  CHECK(torch::equal(back.b.tensor(), m.b.tensor()));
  CHECK(back.c.is<nnx::BatchStat>());
}

TEST_CASE("optional and shared_ptr fields, with a submodule shared by two paths") {
  nnx::Rngs rngs(0);
  Holder h(rngs);
  auto paths = nnx::state(h).paths();
  CHECK(paths == std::vector<std::string>{"maybe.kernel", "maybe.bias", "left.kernel",
                                          "left.bias", "scale"});
  Holder copy = nnx::clone(h);
  CHECK(copy.left.get() == copy.right.get());  // still one module
  CHECK(copy.left.get() != h.left.get());
  CHECK_FALSE(copy.left->kernel.same_as(h.left->kernel));
  auto [graphdef, state] = nnx::split(h);
  Holder back = nnx::merge(graphdef, state);
  CHECK(back.left.get() == back.right.get());
  CHECK(torch::equal(back.right->kernel.tensor(), h.left->kernel.tensor()));
  // The shared module is one module: listed once, at its first path.
  std::vector<std::string> modules;
  for (const auto& [path, m] : h.iter_modules()) modules.push_back(path);
  CHECK(modules == std::vector<std::string>{"", "maybe", "left", "identity"});
  h.maybe.reset();
  CHECK(nnx::state(h).size() == 3);
}

TEST_CASE("stateless modules split and clone by their exact type") {
  Identity id;
  auto [graphdef, state] = nnx::split(id);
  CHECK(state.empty());
  Identity back = nnx::merge(graphdef, state);
  Identity copy = nnx::clone(id);
  (void)back;
  (void)copy;
  SUCCEED("no copier was needed");
}

TEST_CASE("update copies into the existing tensors, so later changes do not leak") {
  nnx::Rngs rngs(0);
  Dense a(2, 2, rngs), b(2, 2, rngs);
  auto kernel_before = a.kernel.tensor();
  nnx::update(a, nnx::state(b));
  CHECK(a.kernel.tensor().is_same(kernel_before));  // same tensor object, new values
  CHECK(torch::equal(a.kernel.tensor(), b.kernel.tensor()));
  b.kernel.tensor().add_(5);
  CHECK_FALSE(torch::equal(a.kernel.tensor(), b.kernel.tensor()));
}

TEST_CASE("merge shares the States' tensors; clone does not and drops autograd history") {
  nnx::Rngs rngs(0);
  Dense a(2, 2, rngs);
  auto [graphdef, state] = nnx::split(a);
  Dense m = nnx::merge(graphdef, state);
  CHECK(m.kernel.tensor().is_same(a.kernel.tensor()));
  // A kernel with history (computed from a leaf): the clone is a leaf of its own storage.
  const auto leaf = a.kernel.tensor().detach().clone().requires_grad_(true);
  a.kernel.set_value(nnx::Array(leaf * 1.0));
  REQUIRE_FALSE(a.kernel.tensor().is_leaf());
  Dense c = nnx::clone(a);
  CHECK(c.kernel.tensor().requires_grad());
  CHECK(c.kernel.tensor().is_leaf());
  CHECK(c.kernel.tensor().data_ptr() != a.kernel.tensor().data_ptr());
  CHECK(torch::equal(c.kernel.tensor(), a.kernel.tensor()));
}

TEST_CASE("inside eval_shape, variables built from tensors are abstract too") {
  auto abstract = nnx::eval_shape([] {
    nnx::Rngs rngs(0);
    auto counter = Counter();
    CHECK(rngs.params() == nnx::random::fold_in(nnx::random::key(0), 0));  // keys stay real
    return counter;
  });
  CHECK(abstract.count.value().is_abstract());
  CHECK(abstract.count.dtype() == torch::kLong);
}

TEST_CASE("free-form metadata cannot take a reserved key") {
  nnx::Metadata m{.extra = {{"out_sharding", "x"}}};
  CHECK_THROWS_WITH(m.to_json(), Contains("reserved") && Contains("Metadata::out_sharding"));
}

TEST_CASE("update names a path given twice and a kind that does not match") {
  nnx::Rngs rngs(0);
  Dense a(2, 2, rngs);
  nnx::State one, two, kind;
  one.add("bias", nnx::Param(torch::ones({2})));
  two.add("bias", nnx::Param(torch::ones({2})));
  kind.add("kernel", nnx::BatchStat(torch::ones({2, 2})));
  CHECK_THROWS_WITH(nnx::update(a, one, two), Contains("bias: given by more than one State"));
  CHECK_THROWS_WITH(nnx::update(a, kind), Contains("kernel: kind BatchStat given for a Param"));
}

namespace {
// A stateless layer and a subclass that only overrides the call: neither declares a field.
struct Halve : nnx::Module {
  nnx::Array operator()(const nnx::Array& x) const { return x * 0.5; }
};
struct DoubledLinear : nnx::Linear {
  using nnx::Linear::Linear;
  nnx::Array operator()(const nnx::Array& x) const { return nnx::Linear::operator()(x) * 2.0; }
};
}  // namespace

TEST_CASE("a Sequential's layers that declare no field of their own split, merge and clone") {
  nnx::Rngs rngs(0);
  nnx::Sequential model{nnx::Linear(3, 4, rngs), Halve{}, DoubledLinear(4, 2, rngs)};
  const nnx::Array x(torch::randn({5, 3}));
  const at::Tensor expected = model(x).local();
  auto [graphdef, state] = nnx::split(model);
  CHECK(state.size() == 4);
  nnx::Sequential merged = nnx::merge(graphdef, state);
  CHECK(torch::equal(merged(x).local(), expected));
  // A clone of a clone keeps the layers' own types (DoubledLinear, not a sliced Linear).
  nnx::Sequential twice = nnx::clone(nnx::clone(model));
  CHECK(torch::equal(twice(x).local(), expected));
  CHECK(twice.get<DoubledLinear>(2).kernel.tensor().data_ptr() !=
        model.get<DoubledLinear>(2).kernel.tensor().data_ptr());
}

namespace {
struct Node : nnx::Module {
  nnx::Param NNX_FIELD(w);
  std::shared_ptr<Node> NNX_FIELD(child);
  Node() : w(torch::ones({2})) {}
};
}  // namespace

TEST_CASE("a cycle through shared_ptr fields is an error naming the path, not a stack overflow") {
  auto a = std::make_shared<Node>();
  a->child = std::make_shared<Node>();
  a->child->child = a;  // back up to the root
  CHECK_THROWS_WITH(nnx::state(*a),
                    Contains("'child.child' is a (anonymous namespace)::Node that contains "
                             "itself through shared_ptr fields (a cycle)") &&
                        Contains("std::weak_ptr"));
  CHECK_THROWS_WITH(nnx::split(*a), Contains("'child.child' is a (anonymous namespace)::Node"));
  CHECK_THROWS_WITH(nnx::clone(*a), Contains("a cycle"));
  a->child->child = nullptr;  // broken, so the nodes can be freed
  // A chain of shared nodes is no cycle.
  Node root;
  root.child = std::make_shared<Node>();
  root.child->child = std::make_shared<Node>();
  CHECK(nnx::state(root).size() == 3);
}

// Error prefixes name the function that raised them, also from inside a lambda.
#include "../catch_after_torch.h"

#include <nnx/core/error.h>

#include <string>

using Catch::Matchers::StartsWith;

namespace {

void checks_in_a_lambda(int value) {
  auto inner = [&] { NNX_CHECK(value > 0, "value must be positive, got {}", value); };
  inner();
}

struct Functor {
  void operator()() const { NNX_FAIL("always"); }
};

template <class T> void checks_in_a_template_lambda(T value) {
  [&] { NNX_CHECK(value > 0, "got {}", value); }();
}

}  // namespace

TEST_CASE("errors from lambdas name the enclosing function, not operator()") {
  CHECK_THROWS_WITH(checks_in_a_lambda(-1),
                    StartsWith("[checks_in_a_lambda] value must be positive, got -1"));
  CHECK_THROWS_WITH(Functor{}(), StartsWith("[Functor] always"));
  CHECK_THROWS_WITH(checks_in_a_template_lambda(-2.5),
                    StartsWith("[checks_in_a_template_lambda<double>] got -2.5"));
  CHECK(nnx::detail::error_scope("matmul", "whatever") == "matmul");
  CHECK(nnx::detail::error_scope("operator()", "int f()") == "operator()");
}

// Under NNX_CHECK_COLLECTIVES=1 every collective compares its call path across ranks, so one
// collective reached from different lines on different ranks is an error. Code that does this by
// design names one origin for those calls instead:
//   nnx::CollectiveOrigin origin("flush of my buffers");
//   if (ready_early) flush(); ...      // every rank flushes once, from here or from there
#pragma once

namespace nnx {

class CollectiveOrigin {
 public:
  explicit CollectiveOrigin(const char* origin);  // a string that outlives the scope
  ~CollectiveOrigin();
  CollectiveOrigin(const CollectiveOrigin&) = delete;
  CollectiveOrigin& operator=(const CollectiveOrigin&) = delete;

 private:
  const char* previous_;
};

}  // namespace nnx

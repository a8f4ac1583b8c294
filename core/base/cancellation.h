// A cancellation token: one shared flag that whoever started a job sets and the job reads between
// its stages (and, where it is cheap, inside its loops). Copies share the flag, so the token handed
// to a worker and the one the caller keeps are the same token. Plain C++ (no Qt): the analysis
// pipeline, the engines and the GUI's job tracker all pass the same type.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/base/status.h"

namespace shardscope {

class CancellationToken {
 public:
  // A fresh token, not cancelled.
  CancellationToken() : flag_(std::make_shared<std::atomic<bool>>(false)) {}

  void Cancel() const { flag_->store(true, std::memory_order_relaxed); }
  bool cancelled() const { return flag_->load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<bool>> flag_;
};

// The error a job returns when it stopped because its token was cancelled.
inline Error CancelledError(const std::string& what) { return Error(what + " was cancelled"); }

}  // namespace shardscope

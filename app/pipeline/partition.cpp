#include "app/pipeline/partition.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/collectives/participants.h"
#include "core/ir/spmd_program.h"
#include "simulator/schedule.h"

namespace shardscope::pipeline {

namespace {

double MillisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Elements of a shape (tuples: the sum of their leaves).
double ElementsOf(const Shape& s) {
  if (s.IsTuple()) {
    double n = 0;
    for (const Shape& t : s.tuple) n += ElementsOf(t);
    return n;
  }
  double n = 1;
  for (int64_t d = 0; d < s.rank(); ++d) n *= static_cast<double>(s.dim(d));
  return n;
}

bool HasTiledLeaf(const HloSharding& s) {
  if (!s.IsTuple()) return s.IsTiled();
  for (const auto& e : s.tuple_elements()) {
    if (e.IsTiled()) return true;
  }
  return false;
}

}  // namespace

bool NeedsPartitioning(const Module& module) {
  if (AlreadyPartitioned(module)) return false;  // an SPMD program (core/ir/spmd_program.h)
  for (const auto& c : module.computations()) {
    for (const auto& i : c->instructions()) {
      if (i->has_sharding() && HasTiledLeaf(*i->sharding())) return true;
    }
  }
  return false;
}

Result<PartitionResult> Partition(const Module& module, const SpmdOptions& options, const CancellationToken& cancel) {
  if (cancel.cancelled()) return CancelledError("SPMD partitioning");
  return PartitionModule(module, options);
}

VerificationVerdict Verify(const Module& original, const Module& spmd, int64_t devices, const VerifyOptions& options,
                           const CancellationToken& cancel) {
  VerificationVerdict v;
  if (cancel.cancelled()) {
    v.state = VerificationVerdict::State::kError;
    v.reason = CancelledError("numerical verification").message;
    return v;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (auto why = WhyNotNumericallyVerifiable(original)) {
    v.state = VerificationVerdict::State::kSkipped;
    v.reason = "not checkable numerically: " + *why;
    return v;
  }
  if (options.max_flops > 0 || options.max_elements > 0) {
    // Cheap upper bounds of what the evaluator would do.
    double elements = 0;
    for (const auto& c : original.computations())
      for (const auto& i : c->instructions()) elements += ElementsOf(i->shape());
    elements *= static_cast<double>(std::max<int64_t>(devices, 1));
    const double flops = CountModuleFlops(original);
    if ((options.max_flops > 0 && flops > options.max_flops) ||
        (options.max_elements > 0 && elements > options.max_elements)) {
      v.state = VerificationVerdict::State::kSkipped;
      char buf[200];
      std::snprintf(buf, sizeof buf, "too large to evaluate here (%.3g FLOPs, %.3g elements over %lld devices)", flops,
                    elements, static_cast<long long>(devices));
      v.reason = buf;
      return v;
    }
  }
  NumericVerifyOptions numeric;
  numeric.float_exponent_spread = options.float_exponent_spread;
  auto report = VerifyPartitioned(original, spmd, devices, options.seed, numeric);
  std::string first_inconclusive;
  if (report.ok() && report->inconclusive && numeric.float_exponent_spread > 0 && !cancel.cancelled()) {
    // Inputs of mixed magnitudes (up to 2^spread apart) can drive a deep program into overflow or
    // chaotic growth where nothing can be compared; inputs of one magnitude may not.
    first_inconclusive = report->detail.substr(0, report->detail.find('\n'));
    numeric.float_exponent_spread = 0;
    report = VerifyPartitioned(original, spmd, devices, options.seed, numeric);
    if (report.ok() && !report->inconclusive)
      report->detail = "inputs of one magnitude (at magnitudes up to 2^" + std::to_string(options.float_exponent_spread) +
                       " apart: " + first_inconclusive + ")\n" + report->detail;
  }
  v.millis = MillisSince(t0);
  if (!report.ok()) {
    v.state = VerificationVerdict::State::kError;
    v.reason = report.error().message;
    return v;
  }
  if (report->inconclusive) {
    // Not a verdict on the partitioning: the reference cannot pin down its own outputs.
    v.state = VerificationVerdict::State::kSkipped;
    v.reason = "ill-conditioned at random inputs: " + std::to_string(report->ill_conditioned) + " of " +
               std::to_string(report->float_elements) +
               " float output elements move by more than a quarter of the tolerance when the unpartitioned program's "
               "sums are rounded in another order";
    v.report = std::move(report).value();
    return v;
  }
  v.state = report->match ? VerificationVerdict::State::kMatch : VerificationVerdict::State::kMismatch;
  v.report = std::move(report).value();
  return v;
}

std::vector<std::optional<CollectiveCost>> EstimateCollectives(const PartitionResult& partition, const Topology& topology,
                                                               const CollectiveOptions& options) {
  std::vector<std::optional<CollectiveCost>> out(partition.collectives.size());
  if (!partition.module) return out;
  const Module& spmd = *partition.module;
  const int64_t replicas = std::max<int64_t>(1, spmd.num_replicas);
  const int64_t partitions = std::max<int64_t>(1, spmd.num_partitions);
  for (size_t k = 0; k < partition.collectives.size(); ++k) {
    const InsertedCollective& c = partition.collectives[k];
    const Instruction* inst = spmd.FindInstruction(c.instruction);
    if (inst == nullptr) continue;
    auto kind = CollectiveKindFromName(OpcodeName(c.kind));
    if (!kind.ok()) continue;
    const double bytes = static_cast<double>(c.bytes_per_device);
    Result<CollectiveCost> cost = Error("");
    if (*kind == CollectiveKind::kCollectivePermute) {
      auto pairs = CollectivePermutePairs(*inst, replicas, partitions);
      if (!pairs.ok()) continue;
      cost = EstimateCollectivePermute(topology, *pairs, bytes, options);
    } else {
      auto groups = CollectiveParticipantGroups(*inst, replicas, partitions);
      if (!groups.ok()) continue;
      cost = EstimateCollective(topology, *kind, *groups, bytes, options);
    }
    if (cost.ok()) out[k] = std::move(cost).value();
  }
  return out;
}

std::map<std::string, std::string> SpmdOrigins(const PartitionResult& partition) {
  std::map<std::string, std::string> out;
  for (const auto& [original, spmd_names] : partition.origin_map) {
    const auto slash = original.rfind('/');
    const std::string computation = slash == std::string::npos ? std::string() : original.substr(0, slash + 1);
    for (const auto& spmd : spmd_names) {
      out.emplace(spmd, original);
      if (!computation.empty() && spmd.find('/') == std::string::npos) out.emplace(computation + spmd, original);
    }
  }
  for (const auto& c : partition.collectives) {
    if (!c.origin.empty()) out.emplace(c.instruction, c.origin);
  }
  return out;
}

}  // namespace shardscope::pipeline

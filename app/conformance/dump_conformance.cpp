// The real-dump pipeline report (dump_conformance.h).
#include "app/conformance/dump_conformance.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "app/conformance/case_kinds.h"
#include "core/eval/numeric_verify.h"
#include "core/ir/hlo_text.h"
#include "core/ir/spmd_program.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope {

namespace {

using namespace ::shardscope::sim;

std::string FirstLine(std::string s) {
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

// A failure reason without the file position and instruction names, so that equal causes group.
std::string Reason(const std::string& stage, const std::string& message) {
  std::string m = FirstLine(message);
  const auto err = m.find("error: ");
  if (err != std::string::npos) m = m.substr(err + 7);
  if (m.size() > 160) m = m.substr(0, 157) + "...";
  return stage + ": " + m;
}

bool HasSharding(const Module& m) {
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (i->has_sharding()) return true;
  return false;
}

int64_t LargestArray(const Module& m) {
  int64_t largest = 0;
  std::function<void(const Shape&)> visit = [&](const Shape& s) {
    if (s.IsTuple()) {
      for (const auto& e : s.tuple) visit(e);
    } else if (s.IsArray()) {
      largest = std::max(largest, s.ElementCount());
    }
  };
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions()) visit(i->shape());
  return largest;
}

// The mesh to simulate `devices` devices on: the module's Shardy mesh when it has that many
// devices (the user's axis names), else one axis.
DeviceMesh SimulationMesh(const Module& m, int64_t devices) {
  if (const DeviceMesh* mesh = ModuleMesh(m); mesh && mesh->num_devices() == devices) {
    std::vector<int64_t> ids = mesh->device_order();
    std::sort(ids.begin(), ids.end());
    bool dense = true;
    for (size_t i = 0; i < ids.size(); ++i) dense = dense && ids[i] == static_cast<int64_t>(i);
    if (dense) return *mesh;
  }
  return DeviceMesh({MeshAxis{"X", devices}});
}

}  // namespace

DumpCaseResult RunDumpCase(const std::string& name, const std::string& text, const DumpConformanceOptions& options) {
  DumpCaseResult r;
  r.file = name;
  auto fail = [&](const std::string& stage, const std::string& message) { r.failures.push_back(Reason(stage, message)); };

  ParseOptions po;
  po.warnings = &r.warnings;
  auto parsed = ParseHloModule(text, name, po);
  if (!parsed.ok()) {
    ParseOptions no_verify;
    no_verify.verify = false;
    fail(ParseHloModule(text, name, no_verify).ok() ? "verify module" : "parse", parsed.error().message);
    return r;
  }
  r.parsed = true;
  std::unique_ptr<Module> module = std::move(parsed).value();
  r.module_name = module->name();
  for (const auto& c : module->computations()) {
    r.instructions += c->instruction_count();
    for (const auto& i : c->instructions()) r.fusions += IsFusion(*i) ? 1 : 0;
  }

  // Round trip.
  const std::string printed = PrintHloModule(*module);
  auto again = ParseHloModule(printed, name + " (printed)");
  std::string why;
  if (!again.ok()) {
    fail("round trip", again.error().message);
  } else if (!ModulesEqual(*module, **again, &why)) {
    fail("round trip", why);
  } else if (PrintHloModule(**again) != printed) {
    fail("round trip", "the printed text is not a fixpoint");
  } else {
    r.round_trip = true;
  }

  // Global program or SPMD program.
  std::unique_ptr<Module> spmd;
  int64_t devices = std::max<int64_t>(1, module->num_partitions) * std::max<int64_t>(1, module->num_replicas);
  if (auto evidence = AlreadyPartitioned(*module)) {
    r.spmd_evidence = *evidence;
    r.partition = 1;  // recognised: left as it is
  } else {
    PropagationOptions prop;
    prop.propagate_to_output = {true};
    prop.propagate_to_parameters = {true};
    r.propagate = 0;
    auto p = PropagateShardings(*module, prop);
    if (!p.ok()) {
      fail("propagate", p.error().message);
    } else {
      r.propagate = 1;
    }
    if (r.propagate == 1 && HasSharding(*module)) {
      r.partition = 0;
      auto part = PartitionModule(*module, SpmdOptions{});
      if (!part.ok()) {
        fail("partition", part.error().message);
      } else {
        r.partition = 1;
        devices = part->module->num_partitions;
        if (options.verify_max_elements > 0 && LargestArray(*module) <= options.verify_max_elements) {
          r.verify = 0;
          auto v = VerifyPartitioned(*module, *part->module, devices, 1);
          if (!v.ok()) fail("verify", v.error().message);
          else if (!v->match) fail("verify", "numerical mismatch, max abs error " + std::to_string(v->max_abs_error));
          else r.verify = 1;
        }
        spmd = std::move(part->module);
      }
    }
  }
  const Module* program = spmd ? spmd.get() : (r.propagate == 0 ? nullptr : module.get());
  if (program) {
    r.devices = devices;
    r.simulate = 0;
    auto chip = ChipPreset(options.chip);
    if (!chip.ok()) {
      fail("simulate", chip.error().message);
      return r;
    }
    const DeviceMesh mesh = SimulationMesh(*program, devices);
    auto topology = Topology::ForMesh(*chip, mesh);
    if (!topology.ok()) {
      fail("simulate", "no " + options.chip + " slice for " + mesh.ToString() + ": " + topology.error().message);
      return r;
    }
    SimulationOptions so;
    so.mesh_text = mesh.ToString();
    so.program.fuse_elementwise = !IsBackendOptimized(*program);  // XLA's fusions are the kernels
    auto sim = Simulate(*program, *topology, so);
    if (!sim.ok()) {
      fail("simulate", sim.error().message);
    } else {
      r.simulate = 1;
      r.simulated_compute_ops = sim->stats.compute_ops;
      r.simulated_collectives = sim->stats.collective_ops;
    }
  }
  return r;
}

namespace conformance {

namespace {

// One dump as a conformance case: each stage that ran is a check (its failure, "stage: reason",
// is what the check got); the warnings and a description of the program are notes.
void RunDumpFile(const CaseFiles& files, const ConformanceOptions& options, CaseResult* c, std::vector<CheckResult>* checks) {
  const std::string name = std::filesystem::path(files.file).filename().string();
  c->name = name;
  std::ifstream in(files.file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  DumpConformanceOptions o;
  o.chip = options.chip;
  o.verify_max_elements = options.verify_max_elements;
  const DumpCaseResult r = RunDumpCase(name, text.str(), o);
  c->parsed = r.parsed;
  c->op_kind = r.spmd_evidence.empty() ? "global program" : "SPMD program";
  c->partitioned = r.partition == 1 && r.spmd_evidence.empty();
  if (r.verify >= 0) c->verified = r.verify;
  std::vector<std::string> unexplained = r.failures;
  auto stage = [&](const char* what, std::initializer_list<const char*> prefixes, bool ran, bool held) {
    if (!ran) return;
    CheckResult check;
    check.case_name = name;
    check.subject = what;
    check.op_kind = what;
    check.expected = "holds";
    check.passed = held;
    check.got = held ? "holds" : "fails";
    for (auto it = unexplained.begin(); it != unexplained.end(); ++it) {
      if (std::any_of(prefixes.begin(), prefixes.end(), [&](const char* p) { return it->rfind(std::string(p) + ": ", 0) == 0; })) {
        check.got = *it;
        unexplained.erase(it);
        break;
      }
    }
    checks->push_back(std::move(check));
  };
  stage("parse", {"parse", "verify module"}, true, r.parsed);
  stage("round trip", {"round trip"}, r.parsed, r.round_trip);
  stage("propagate", {"propagate"}, r.propagate >= 0, r.propagate == 1);
  stage("partition", {"partition"}, r.partition >= 0 && r.spmd_evidence.empty(), r.partition == 1);
  stage("verify", {"verify"}, r.verify >= 0, r.verify == 1);
  stage("simulate", {"simulate"}, r.simulate >= 0, r.simulate == 1);
  c->errors = unexplained;
  for (const auto& w : r.warnings) c->notes.push_back("warning: " + w);
  if (!r.parsed) return;
  std::string about = std::to_string(r.instructions) + " instructions";
  if (r.fusions) about += ", " + std::to_string(r.fusions) + " fusions";
  about += r.spmd_evidence.empty() ? ", global program" : ", SPMD program (" + r.spmd_evidence + "; left unchanged)";
  if (r.simulate == 1) {
    about += ", simulated on " + std::to_string(r.devices) + " devices (" + std::to_string(r.simulated_compute_ops) +
             " kernels, " + std::to_string(r.simulated_collectives) + " collectives)";
  }
  c->notes.push_back(about);
}

}  // namespace

CaseKind DumpCases() {
  return CaseKind{"dumps", {".hlo", ".txt"}, RateUnit::kCases, "dumps pass", /*partitions=*/true, &RunDumpFile};
}

}  // namespace conformance

}  // namespace shardscope

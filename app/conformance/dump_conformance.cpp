// The real-dump pipeline report (dump_conformance.h).
#include "app/conformance/dump_conformance.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

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

Result<DumpConformanceSummary> RunDumpConformance(const std::string& dir, std::ostream& out,
                                                  const DumpConformanceOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error(dir + ": not a directory");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".hlo" || ext == ".txt")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  DumpConformanceSummary s;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    DumpCaseResult r = RunDumpCase(f.filename().string(), buf.str(), options);
    ++s.total;
    s.parsed += r.parsed;
    s.round_trip += r.round_trip;
    s.spmd_programs += !r.spmd_evidence.empty();
    s.propagate_run += r.propagate >= 0;
    s.propagate_ok += r.propagate == 1;
    s.partition_run += r.partition >= 0;
    s.partition_ok += r.partition == 1;
    s.verify_run += r.verify >= 0;
    s.verify_ok += r.verify == 1;
    s.simulate_run += r.simulate >= 0;
    s.simulate_ok += r.simulate == 1;
    s.passed += r.passed();
    for (const auto& why : r.failures) ++s.failures_by_reason[why];
    if (options.verbose || !r.passed()) {
      out << (r.passed() ? "ok   " : "FAIL ") << r.file << ": " << r.instructions << " instructions";
      if (r.fusions) out << ", " << r.fusions << " fusions";
      out << (r.spmd_evidence.empty() ? ", global program" : ", SPMD program (" + r.spmd_evidence + ")");
      if (r.simulate == 1)
        out << ", simulated on " << r.devices << " devices (" << r.simulated_compute_ops << " kernels, "
            << r.simulated_collectives << " collectives)";
      out << "\n";
      for (const auto& w : r.warnings) out << "     " << w << "\n";
      for (const auto& why : r.failures) out << "     " << why << "\n";
    }
    s.cases.push_back(std::move(r));
  }
  auto line = [&](const char* what, int64_t ok, int64_t run) { out << "  " << what << ok << "/" << run << "\n"; };
  out << "dump files:        " << s.total << "\n";
  line("parse (verified):  ", s.parsed, s.total);
  line("round trip:        ", s.round_trip, s.parsed);
  out << "  SPMD programs:     " << s.spmd_programs << " recognised (partition leaves them unchanged)\n";
  line("propagate:         ", s.propagate_ok, s.propagate_run);
  line("partition:         ", s.partition_ok - s.spmd_programs, s.partition_run - s.spmd_programs);
  line("verify:            ", s.verify_ok, s.verify_run);
  line("simulate:          ", s.simulate_ok, s.simulate_run);
  out << "failures by reason:" << (s.failures_by_reason.empty() ? " none" : "") << "\n";
  for (const auto& [why, n] : s.failures_by_reason) out << "  " << n << "x " << why << "\n";
  out << "dumps: " << s.passed << "/" << s.total << " pass\n";
  return s;
}

}  // namespace shardscope

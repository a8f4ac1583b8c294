// fuzz_seeds OUT_DIR SOURCE_DIR [SHARED_DIR]: writes the seed corpora the project makes for its
// fuzz targets, one folder per target under OUT_DIR, and OUT_DIR/hlo.dict, the HLO dictionary:
//
//   hlo_roundtrip, pipeline_text   the model zoo (small settings, every annotation set), the HLO
//                                  modules written in the tests (tests/*.cpp), and XLA's test
//                                  modules from SHARED_DIR/conformance when it is present
//   sharding_roundtrip             every sharding of those modules and of the conformance
//                                  expectations, and device meshes
//   pipeline_generated             byte strings from a fixed pseudo-random sequence
//   project_file                   projects of the zoo models with their annotations
//   chip_json                      every chip preset as JSON (as a base and written out in full),
//                                  and the conformance corpus's settings files
//   run_store                      a store holding two simulated runs, and an empty store
//
// Nothing here is kept in the repository: seeds are made at test or fuzz time from what the
// project and ../shared hold. The fixed corpus in fuzz/corpus/<target>/ (hand-made inputs and
// minimised reproducers of findings) is separate.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/json.h"
#include "core/ir/hlo_text.h"
#include "core/ir/opcodes.h"
#include "core/project/project_file.h"
#include "core/zoo/zoo.h"
#include "app/pipeline/pipeline.h"
#include "app/pipeline/sources.h"
#include "simulator/hardware.h"
#include "simulator/run_store.h"

namespace fs = std::filesystem;
using namespace shardscope;
using namespace shardscope::sim;

namespace {

class Corpus {
 public:
  Corpus(const fs::path& root, const std::string& target) : dir_(root / target) { fs::create_directories(dir_); }
  // Writes one seed; identical contents are written once.
  void Add(const std::string& name, const std::string& bytes) {
    if (!seen_.insert(bytes).second) return;
    std::string safe;
    for (char c : name) safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
    std::ofstream(dir_ / (safe.substr(0, 80) + "-" + std::to_string(seen_.size())), std::ios::binary) << bytes;
  }
  size_t size() const { return seen_.size(); }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  std::set<std::string> seen_;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<fs::path> FilesIn(const fs::path& dir, const std::string& extension) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == extension) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- modules ---------------------------------------------------------------------------------------

struct NamedModule {
  std::string name;
  std::unique_ptr<Module> module;
  DeviceMesh mesh;
};

// Every zoo model at small sizes, with each annotation set it knows.
std::vector<NamedModule> ZooModules() {
  std::vector<NamedModule> out;
  const std::map<std::string, std::string> small = {{"batch", "4"}, {"seq", "4"},    {"model", "8"},  {"hidden", "16"},
                                                    {"heads", "2"}, {"layers", "1"}, {"mesh_x", "2"}, {"mesh_y", "2"}};
  for (const ZooModel& model : ZooList()) {
    for (const char* annotations : {"none", "attempt1", "attempt2", "finalized"}) {
      ZooOverrides overrides;
      for (const ZooParameter& p : model.parameters) {
        if (auto it = small.find(p.name); it != small.end()) overrides[p.name] = it->second;
        if (p.name == "annotations") overrides[p.name] = annotations;
      }
      auto built = ZooBuild(model.name, overrides);
      auto mesh = ZooMesh(model.name, overrides);
      if (!built.ok() || !mesh.ok()) continue;
      out.push_back({model.name + "-" + annotations, std::move(*built), *mesh});
    }
  }
  return out;
}

// The HLO modules the tests write as string literals: "HloModule ..." followed by adjacent literals
// (a literal cut by an expression ends the module there: still a fine seed for the parser).
std::vector<std::pair<std::string, std::string>> TestModules(const fs::path& tests) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const fs::path& file : FilesIn(tests, ".cpp")) {
    const std::string src = ReadFile(file);
    size_t at = 0;
    int n = 0;
    while ((at = src.find("\"HloModule", at)) != std::string::npos) {
      std::string module;
      size_t p = at;
      while (p < src.size() && src[p] == '"') {
        ++p;
        while (p < src.size() && src[p] != '"') {
          if (src[p] == '\\' && p + 1 < src.size()) {
            const char e = src[++p];
            module += e == 'n' ? '\n' : e == 't' ? '\t' : e;
          } else {
            module += src[p];
          }
          ++p;
        }
        ++p;  // closing quote
        while (p < src.size() && std::isspace(static_cast<unsigned char>(src[p]))) ++p;
      }
      out.emplace_back(file.stem().string() + "-" + std::to_string(++n), module);
      at = p;
    }
  }
  return out;
}

void CollectShardings(const Module& m, Corpus& shardings) {
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      if (i->has_sharding()) shardings.Add("sharding", i->sharding()->ToString(/*include_metadata=*/true));
    }
  }
}

// ---- chips and stores ------------------------------------------------------------------------------

std::string ChipJson(const ChipSpec& c) {
  std::string pod;
  for (int64_t d : c.pod_shape) pod += (pod.empty() ? "" : "x") + std::to_string(d);
  std::vector<json::Member> m;
  auto add = [&](const char* k, json::Value v) { m.push_back({k, {}, std::move(v)}); };
  add("name", json::Value::String(c.name + "-custom"));
  add("description", json::Value::String(c.description));
  add("peak_flops", json::Value::Number(c.peak_flops));
  add("hbm_bytes", json::Value::Number(c.hbm_bytes));
  add("hbm_bandwidth", json::Value::Number(c.hbm_bandwidth));
  add("ici_bandwidth", json::Value::Number(c.ici_link_bandwidth));
  add("links_per_chip", json::Value::Integer(c.links_per_chip));
  add("hop_latency", json::Value::Number(c.hop_latency));
  add("dcn_bandwidth", json::Value::Number(c.dcn_bandwidth));
  add("interconnect", json::Value::String(c.interconnect == InterconnectKind::kSwitch ? "switch" : "grid"));
  add("physical_dims", json::Value::Integer(c.physical_dims));
  if (!pod.empty()) add("pod_shape", json::Value::String(pod));
  add("wraparound", json::Value::String(std::string(WraparoundRuleName(c.wraparound))));
  add("max_cores_per_chip", json::Value::Integer(c.max_cores_per_chip));
  add("cores_per_chip", json::Value::Integer(c.cores_per_chip));
  add("flops_efficiency", json::Value::Number(c.flops_efficiency));
  add("hbm_efficiency", json::Value::Number(c.hbm_efficiency));
  return json::Serialize(json::Value::Object(std::move(m)), 2);
}

// A store with two simulated runs of the MLP on a 2x2 mesh of tpu-v5e chips, through the pipeline.
Status WriteRunStore(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  auto store = pipeline::RunDatabase::Open(path.string());
  if (!store.ok()) return store.error();
  const ZooOverrides o = {{"batch", "8"}, {"model", "16"}, {"hidden", "32"}, {"layers", "1"}, {"mesh_x", "2"}, {"mesh_y", "2"}};
  for (const char* label : {"first", "second"}) {
    auto model = pipeline::BuildZooModel("mlp", o);
    if (!model.ok()) return model.error();
    pipeline::PipelineOptions options;
    auto topology = pipeline::SliceForMesh("tpu-v5e", model->mesh);
    if (!topology.ok()) return topology.error();
    options.topology = *topology;
    options.simulation = SimulationOptions{};
    options.simulation->mesh_text = model->mesh.ToString();
    options.simulation->label = label;
    options.store = *store;
    auto run = pipeline::RunPipeline(std::move(model->module), options);
    if (!run.ok()) return Error(run.FailureText());
  }
  return Status::Ok();
}

// ---- the dictionary --------------------------------------------------------------------------------

std::string Dictionary() {
  std::vector<std::string> words = {
#define SHARDSCOPE_DICT_OPCODE(e, s) s,
      SHARDSCOPE_OPCODES(SHARDSCOPE_DICT_OPCODE)
#undef SHARDSCOPE_DICT_OPCODE
  };
  for (int t = static_cast<int>(PrimitiveType::kPred); t < static_cast<int>(PrimitiveType::kTuple); ++t) {
    words.emplace_back(PrimitiveTypeName(static_cast<PrimitiveType>(t)));
  }
  for (const char* w :
       {"HloModule", "ENTRY", "ROOT", "parameter(", "constant(", "sharding=", "{replicated}", "{maximal device=",
        "{manual}", "{unknown}", "devices=[", "<=[", "T(", "last_tile_dim_replicate", "last_tile_dims={", "replicated",
        "manual", "unreduced", "metadata={", "op_name=", "backend_config=", "num_partitions=", "replica_count=",
        "entry_computation_layout=", "lhs_contracting_dims={", "rhs_contracting_dims={", "lhs_batch_dims={",
        "rhs_batch_dims={", "dimensions={", "slice={", "[0:2]", "window={", "size=", "stride=", "pad=", "lhs_dilate=",
        "rhs_dilate=", "dim_labels=", "b01f_01io->b01f", "feature_group_count=", "batch_group_count=", "padding=",
        "iota_dimension=", "index_vector_dim=", "offset_dims={", "collapsed_slice_dims={", "start_index_map={",
        "slice_sizes={", "update_window_dims={", "inserted_window_dims={", "scatter_dims_to_operand_dims={",
        "to_apply=", "condition=", "body=", "branch_computations={", "true_computation=", "false_computation=",
        "calls=", "custom_call_target=", "replica_groups={", "replica_groups=[", "channel_id=", "use_global_device_ids=true",
        "source_target_pairs={", "split_dimension=", "concat_dimension=", "direction=", "LT", "GT", "EQ", "is_stable=true",
        "tuple_index=", "{1,0}", "mesh[", "'x'=2", "{'x'}", "(", ")", "{", "}", "[", "]", ",", "=", ":", "->", "%", "/*", "*/",
        "SPMDFullToShardShape", "SPMDShardToFullShape", "Sharding", "shard_as", "shard_like"}) {
    words.emplace_back(w);
  }
  std::string out = "# HLO text: opcodes, element types, attributes and sharding syntax (written by fuzz_seeds)\n";
  for (const std::string& w : words) out += json::Quote(w) + "\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR SOURCE_DIR [SHARED_DIR]\n");
    return 2;
  }
  const fs::path out(argv[1]), source(argv[2]);
  const fs::path shared = argc > 3 ? fs::path(argv[3]) : fs::path();
  fs::create_directories(out);
  Corpus hlo(out, "hlo_roundtrip"), pipeline(out, "pipeline_text"), shardings(out, "sharding_roundtrip"),
      generated(out, "pipeline_generated"), projects(out, "project_file"), chips(out, "chip_json"), stores(out, "run_store");

  // Modules: the zoo, the tests' own, XLA's.
  for (NamedModule& m : ZooModules()) {
    const std::string text = PrintHloModule(*m.module);
    hlo.Add(m.name, text);
    pipeline.Add(m.name, text);
    CollectShardings(*m.module, shardings);
    shardings.Add("mesh", m.mesh.ToString());
    // The project a person would save: the annotations as such, the module text without them.
    ProjectContents p;
    p.mesh = m.mesh;
    p.source_kind = "zoo";
    p.source = m.name;
    for (const auto& c : m.module->computations()) {
      for (const auto& i : c->instructions()) {
        if (!i->has_sharding()) continue;
        p.annotations.push_back({QualifiedInstructionName(*m.module, *i), *i->sharding()});
        if (p.selected.empty()) p.selected = p.annotations.back().instruction;
        i->clear_sharding();
      }
    }
    projects.Add(m.name, WriteProjectFile(m.module.get(), p));
  }
  for (const auto& [name, text] : TestModules(source / "tests")) {
    hlo.Add(name, text);
    pipeline.Add(name, text);
    if (auto m = ParseHloModule(text); m.ok()) CollectShardings(**m, shardings);
  }
  const fs::path conformance = shared / "conformance" / "xla";
  if (!shared.empty()) {
    for (const fs::path& file : FilesIn(conformance, ".hlo")) {
      const std::string text = ReadFile(file);
      hlo.Add(file.stem().string(), text);
      // The partitioner's own test modules are small; the whole set keeps the replay quick.
      if (file.parent_path().filename() == "spmd" && text.size() < 8000) pipeline.Add(file.stem().string(), text);
      if (auto m = ParseHloModule(text, file.string(), ParseOptions{false}); m.ok()) CollectShardings(**m, shardings);
    }
    for (const fs::path& file : FilesIn(conformance, ".expect")) {
      std::istringstream lines(ReadFile(file));
      std::string line;
      while (std::getline(lines, line)) {
        const size_t tab = line.find('\t');
        if (tab != std::string::npos && line.compare(tab + 1, 4, "NONE") != 0) shardings.Add("expect", line.substr(tab + 1));
      }
    }
    for (const fs::path& file : FilesIn(conformance, ".json")) chips.Add(file.stem().string(), ReadFile(file));
  }
  for (const char* mesh : {"X=4,Y=4", "x:2,y:8,z:2", "{X:2, Y:8, Z:2}", "data=2,model=4 device_ids=(7,6,5,4,3,2,1,0)"}) {
    shardings.Add("mesh", mesh);
  }

  // Generated pipeline inputs: bytes from a fixed sequence, short and long.
  std::mt19937_64 rng(20);
  for (int i = 0; i < 64; ++i) {
    std::string bytes(static_cast<size_t>(8 + 4 * i), '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    generated.Add("bytes", bytes);
  }

  // Chips.
  for (const std::string& name : ChipPresetNames()) {
    chips.Add(name, "{\"base\": " + json::Quote(name) + "}\n");
    if (auto chip = ChipPreset(name); chip.ok()) chips.Add(name + "-full", ChipJson(*chip));
  }

  // Run stores.
  const fs::path store = out / "seed-store.sqlite";
  if (Status s = WriteRunStore(store); !s.ok()) {
    std::fprintf(stderr, "fuzz_seeds: the run store seed could not be made: %s\n", s.error().message.c_str());
    return 1;
  }
  stores.Add("two-runs", ReadFile(store));
  fs::remove(store);
  {
    auto empty = RunStore::Open(store.string());
    if (!empty.ok()) return 1;
  }
  stores.Add("empty", ReadFile(store));
  fs::remove(store);

  std::ofstream(out / "hlo.dict") << Dictionary();
  std::printf("seeds in %s: hlo_roundtrip %zu, pipeline_text %zu, sharding_roundtrip %zu, pipeline_generated %zu, "
              "project_file %zu, chip_json %zu, run_store %zu%s\n",
              out.c_str(), hlo.size(), pipeline.size(), shardings.size(), generated.size(), projects.size(), chips.size(),
              stores.size(), shared.empty() || !fs::is_directory(conformance) ? " (no conformance corpus)" : "");
  return 0;
}

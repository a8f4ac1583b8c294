#include "app/pipeline/reproduce.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "app/pipeline/book_collectives.h"
#include "app/pipeline/pipeline.h"
#include "app/pipeline/propagate.h"
#include "app/pipeline/weight_update_sharding_paper.h"
#include "core/ir/scale_dims.h"
#include "core/sharding/mesh.h"
#include "core/zoo/zoo.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope::pipeline {

std::string_view ReproduceMetricName(ReproduceMetric m) {
  switch (m) {
    case ReproduceMetric::kStepTime: return "step time";
    case ReproduceMetric::kMfu: return "MFU";
    case ReproduceMetric::kPeakMemory: return "peak memory";
    case ReproduceMetric::kAllToAllShare: return "all-to-all share";
    case ReproduceMetric::kStepBeforePass: return "step before pass";
    case ReproduceMetric::kStepAfterPass: return "step after pass";
    case ReproduceMetric::kSpeedup: return "speedup";
    case ReproduceMetric::kStepReduction: return "step reduction";
    case ReproduceMetric::kCollectiveTime: return "collective time";
    case ReproduceMetric::kTimeRatio: return "time ratio";
    case ReproduceMetric::kBubbleShare: return "bubbles";
    case ReproduceMetric::kRecomputeShare: return "recompute";
    case ReproduceMetric::kRawUtilization: return "raw FLOPS util";
  }
  return "?";
}

namespace {

constexpr double kGB = 1e9;

// The bounds for Table 2 (the whole-model issue): 15% step time, 5 points of MFU, 10% peak memory.
PublishedFigure Step(double s) { return {ReproduceMetric::kStepTime, s, 0.15}; }
PublishedFigure Mfu(double percent) { return {ReproduceMetric::kMfu, percent, 5.0}; }
PublishedFigure Memory(double gb) { return {ReproduceMetric::kPeakMemory, gb * kGB, 0.10}; }

// GSPMD Table 2 (validation.md G4): the dense Transformer with wide layers on TPU v3 cores. The
// zoo's Transformer with the paper's M, H, N, D, vocabulary (32000: the one-hot embedding, the
// softmax layer and its cross-entropy, annotated as the paper's Figure 2 says), sequence 1024, f32
// weights, bf16 activations and Table 1's "2D finalized" annotations. SGD stands in for the paper's
// Adafactor: its factored state is (M + H) floats per matrix (under 1 MB per device), and its update,
// as the simulator fuses it, reads and writes each matrix shard 10 times where XLA's fused update
// needs about 7 (SGD: 3). Neither choice moves a step by more than 1%; with Adafactor the 128-device
// column's MFU is 0.3 points past the tolerance (docs/reproduce.md, "gspmd-table2", with the fusion
// rules that were tried).
ReproduceColumn Table2Column(std::string label, int64_t layers, int64_t model, int64_t hidden, int64_t heads,
                             int64_t head_dim, int64_t batch, int64_t x, int64_t y, double step, double mfu,
                             double memory_gb, bool small) {
  ReproduceColumn c;
  c.label = std::move(label);
  c.model = "transformer";
  c.settings = {{"batch", std::to_string(batch)}, {"seq", "1024"},          {"model", std::to_string(model)},
                {"hidden", std::to_string(hidden)}, {"heads", std::to_string(heads)}, {"head_dim", std::to_string(head_dim)},
                {"layers", std::to_string(layers)}, {"vocab", "32000"},     {"optimizer", "sgd"},   {"dtype", "f32"},
                {"act_dtype", "bf16"},              {"annotations", "finalized"}, {"mesh_x", std::to_string(x)},
                {"mesh_y", std::to_string(y)}};
  c.mesh = "X=" + std::to_string(x) + ",Y=" + std::to_string(y);
  c.published = {Step(step), Mfu(mfu), Memory(memory_gb)};
  c.small = small;
  return c;
}

// GSPMD Table 3: the narrower dense Transformer of section 5.1 (M=4096, H=16384, N=64, D=128, 64
// layers, 16B weights), 2D finalized on meshes of 64, 128 and 256 cores, built as Table 2's
// columns. Each runs on the v3 slice of its core count (`slice`: 64 cores are 4x8 chips, 128 are
// 8x8, 256 are 8x16); ForMesh would shape a slice after the mesh (16x2 chips for (16,4)), which no
// v3 pod offers.
ReproduceColumn Table3Column(int64_t x, int64_t y, int64_t batch, std::vector<int64_t> slice, double memory_gb,
                             double step, double mfu, bool small) {
  ReproduceColumn c = Table2Column("(" + std::to_string(x) + "," + std::to_string(y) + ") " + std::to_string(x * y) + " devices",
                                   64, 4096, 16384, 64, 128, batch, x, y, step, mfu, memory_gb, small);
  c.slice = std::move(slice);
  return c;
}

PublishedFigure AllToAll(double percent) { return {ReproduceMetric::kAllToAllShare, percent, 3.0}; }

// GSPMD Table 6 (validation.md G5): GShard's sparse MoE Transformer, one expert per device on a
// 1-D mesh, batch 4 per device (docs/zoo.md lists the settings); SGD stands in for Adafactor as in
// Table 2. Without rematerialisation (the paper does not say; docs/reproduce.md gives the figures
// with remat=1, which halve the peak and lengthen the step by a forward pass).
ReproduceColumn Table6Column(int64_t devices, std::vector<int64_t> slice, double step, double mfu, double memory_gb,
                             double all_to_all, bool small) {
  ReproduceColumn c;
  c.label = std::to_string(devices) + " experts/devices";
  c.model = "moe-transformer";
  const std::string n = std::to_string(devices);
  c.settings = {{"annotations", "gshard"}, {"layers", "36"},   {"model", "1024"},      {"hidden", "8192"},
                {"heads", "16"},           {"head_dim", "64"}, {"seq", "1024"},        {"act_dtype", "bf16"},
                {"experts", n},            {"mesh_x", n},      {"mesh_y", "1"},        {"batch", std::to_string(4 * devices)},
                {"optimizer", "sgd"}};
  c.mesh = "X=" + n + ",Y=1";
  c.published = {Step(step), Mfu(mfu), Memory(memory_gb), AllToAll(all_to_all)};
  // The v3 slice of that many cores (`slice`: 32 cores are 4x4 chips, ... 2048 the 32x32 pod).
  // ForMesh gives the three larger ones itself; a 1-D mesh of 16 chips it would lay on a 16x1
  // line, whose one link across the middle carries half the all-to-all (docs/reproduce.md).
  c.slice = std::move(slice);
  c.small = small;
  return c;
}

// GSPMD Table 7: the hybrid sparse/dense MoE Transformer (E on X; H and N on Y in MoE layers; dense
// layers as Table 1), experts = X. Our copy of the table garbles the H and N rows; read as
// H = 32768, 32768, 131072, 131072 and N = 128, 128, 512, 512 (D = 128) they are consistent with
// everything else the paper says: batch x per-expert weight size grows with the device count (32,
// 128, 512, 2048), and with M = 4096 and 22 layers (11 MoE, 11 dense) the parameter counts come
// out at 32.5B, 56.1B, 413B and 791B against the published 33B, 57B, 420B and 804B (docs/zoo.md).
// M and the layer count are our choice (only their product is fixed by the counts); sequence 1024
// as in Tables 2 and 6; SGD stands in for Adafactor as there.
ReproduceColumn Table7Column(int64_t x, int64_t y, int64_t hidden, int64_t heads, int64_t batch, double step,
                             double mfu, double memory_gb, bool small) {
  ReproduceColumn c;
  c.label = "(" + std::to_string(x) + "," + std::to_string(y) + ") " + std::to_string(x) + " experts";
  c.model = "moe-transformer";
  c.settings = {{"annotations", "hybrid"},           {"layers", "22"},
                {"model", "4096"},                   {"hidden", std::to_string(hidden)},
                {"heads", std::to_string(heads)},    {"head_dim", "128"},
                {"seq", "1024"},                     {"act_dtype", "bf16"},
                {"experts", std::to_string(x)},      {"mesh_x", std::to_string(x)},
                {"mesh_y", std::to_string(y)},       {"batch", std::to_string(batch)},
                {"groups", std::to_string(batch)},   {"optimizer", "sgd"}};
  c.mesh = "X=" + std::to_string(x) + ",Y=" + std::to_string(y);
  c.published = {Step(step), Mfu(mfu), Memory(memory_gb)};
  c.small = small;
  return c;
}

// The book's collectives (validation.md C1-C8), one column each. Where the book's figure is the
// large-N V / W, the published figure compared with is the book's times (N - 1) / N, the exact ring
// validation.md asks to model; the label says so.
std::vector<ReproduceColumn> BookCollectiveColumns() {
  std::vector<ReproduceColumn> out;
  for (const BookCollectiveCase& b : BookCollectiveCases()) {
    ReproduceColumn c;
    c.book_collective_case = b.id;
    c.label = b.label;
    if (b.exact_factor != 1) {
      char text[96];
      std::snprintf(text, sizeof text, " [book %.4g us x %.3g]", b.published * 1e6, b.exact_factor);
      c.label += text;
    }
    c.chip = b.chip;
    c.cores_per_chip = 1;
    c.mesh = b.mesh;
    c.published = {{b.all_to_all_ratio ? ReproduceMetric::kTimeRatio : ReproduceMetric::kCollectiveTime,
                    b.published * b.exact_factor, b.tolerance}};
    c.small = true;
    out.push_back(std::move(c));
  }
  return out;
}

// GSPMD Table 8 (validation.md G6): the 3-D U-Net with spatial partitioning (first mesh axis data,
// second spatial), annotated on its inputs only.
ReproduceColumn Table8Column(int64_t x, int64_t y, int64_t image, int64_t batch, double step, double mfu, double memory_gb,
                             bool small) {
  ReproduceColumn c;
  c.label = "(" + std::to_string(x) + "," + std::to_string(y) + ") image " + std::to_string(image);
  c.model = "unet3d";
  c.settings = {{"annotations", "spatial"}, {"act_dtype", "bf16"},        {"image", std::to_string(image)},
                {"batch", std::to_string(batch)}, {"mesh_x", std::to_string(x)}, {"mesh_y", std::to_string(y)}};
  c.mesh = "X=" + std::to_string(x) + ",Y=" + std::to_string(y);
  c.published = {Step(step), Mfu(mfu), Memory(memory_gb)};
  c.small = small;
  return c;
}

// Weight-update sharding, paper 000 section 6.1 (validation.md W1): a column per experiment of
// WeightUpdateShardingPaperCases. W1 (1024 chips) publishes both step times: the bounds are
// 25% on each and 15% on their ratio. The other two publish a step-time reduction ("in the range of
// 9%", "a 6% speedup"): within a factor of 1.5 of 9% (4.5 points) and within a quarter of 6% (1.5
// points), the bounds tests/test_wus_paper.cpp holds.
std::vector<ReproduceColumn> WeightUpdateShardingColumns() {
  std::vector<ReproduceColumn> out;
  for (const WeightUpdateShardingPaperCase& p : WeightUpdateShardingPaperCases()) {
    ReproduceColumn c;
    c.weight_update_sharding_case = p.id;
    c.model = p.model;
    c.settings = p.settings;
    c.mesh = p.mesh.ToString();
    int64_t chips = 1;
    for (int64_t n : p.chips) chips *= n;
    c.label = p.model + " " + std::to_string(chips) + " chips";
    if (p.paper_before_s > 0 && p.paper_after_s > 0) {
      c.published = {{ReproduceMetric::kStepBeforePass, p.paper_before_s, 0.25},
                     {ReproduceMetric::kStepAfterPass, p.paper_after_s, 0.25},
                     {ReproduceMetric::kSpeedup, p.paper_before_s / p.paper_after_s, 0.15}};
    } else {
      const double points = p.model == "transformer" ? 0.5 * 100 * p.paper_reduction : 0.25 * 100 * p.paper_reduction;
      c.published = {{ReproduceMetric::kStepReduction, 100 * p.paper_reduction, points}};
    }
    c.small = true;  // seconds each
    out.push_back(std::move(c));
  }
  return out;
}

// Pipelining (issue 14): bubble shares within 3 points of the paper's; the circular schedule's
// step-time gain over GPipe within 15% of the paper's gain. The issue sets no bound on recompute
// and the raw utilisation: they take MFU's 5 points.
PublishedFigure Bubbles(double percent) { return {ReproduceMetric::kBubbleShare, percent, 3.0}; }
PublishedFigure Recompute(double percent) { return {ReproduceMetric::kRecomputeShare, percent, 5.0}; }
PublishedFigure RawUtil(double percent) { return {ReproduceMetric::kRawUtilization, percent, 5.0}; }
PublishedFigure Gain(double before_s, double after_s) {
  const double gain = 100 * (1 - after_s / before_s);
  return {ReproduceMetric::kStepReduction, gain, 0.15 * gain};
}

// The zoo's pipelined-transformer (core/zoo/pipelined_transformer.h) on an (L, X, Y) mesh: Table 1's
// "2D finalized" annotations on X / Y (weights not sharded over X, GSPMD §5.2), sequence 1024, f32
// weights, bf16 activations, Adafactor, rematerialisation (GPipe's, §5.2).
struct PipelineShape {
  int64_t layers, model, hidden, heads, head_dim;
};
ReproduceColumn PipelinedColumn(const PipelineShape& m, const std::string& schedule, int64_t l, int64_t x, int64_t y,
                                int64_t microbatches, int64_t microbatch, std::vector<PublishedFigure> published, bool small) {
  ReproduceColumn c;
  auto str = [](int64_t v) { return std::to_string(v); };
  c.label = "(" + str(l) + "," + str(x) + "," + str(y) + ") " + (schedule == "circular" ? "circular " : "") +
            str(microbatches) + "x" + str(microbatch);
  c.model = "pipelined-transformer";
  c.settings = {{"stages", str(l)},          {"microbatches", str(microbatches)}, {"microbatch", str(microbatch)},
                {"seq", "1024"},             {"model", str(m.model)},             {"hidden", str(m.hidden)},
                {"heads", str(m.heads)},     {"head_dim", str(m.head_dim)},       {"layers", str(m.layers)},
                {"schedule", schedule},      {"remat", "1"},                      {"optimizer", "adafactor"},
                {"dtype", "f32"},            {"act_dtype", "bf16"},               {"annotations", "finalized"},
                {"mesh_x", str(x)},          {"mesh_y", str(y)}};
  c.mesh = "L=" + str(l) + ",X=" + str(x) + ",Y=" + str(y);
  c.published = std::move(published);
  c.small = small;
  return c;
}

// GSPMD Table 4: the 16B narrower model of Table 3 (M=4096, H=16384, N=64, D=128, 64 layers)
// pipelined on 256 TPU v3 cores, GPipe schedule, on the v3 slice of 256 cores (8x16 chips; ForMesh
// alone would give (2,16,8) a 32x4 slice).
std::vector<ReproduceColumn> Table4Columns() {
  const PipelineShape m{64, 4096, 16384, 64, 128};
  auto col = [&](int64_t l, int64_t x, int64_t y, int64_t n, int64_t mb, double memory_gb, double step, double raw,
                 double bubbles, double recompute) {
    ReproduceColumn c = PipelinedColumn(m, "gpipe", l, x, y, n, mb,
                                        {Step(step), Memory(memory_gb), RawUtil(raw), Bubbles(bubbles), Recompute(recompute)},
                                        /*small=*/true);  // about 2 s each
    c.slice = {8, 16};
    return c;
  };
  return {col(2, 16, 8, 16, 64, 14.9, 24.0, 46.2, 5.6, 22.3), col(4, 16, 4, 16, 64, 13.3, 22.3, 58.0, 14.8, 21.3),
          col(4, 16, 4, 32, 32, 13.1, 22.2, 51.8, 8.0, 21.7),  col(8, 16, 2, 32, 32, 15.0, 23.4, 54.8, 16.5, 22.2),
          col(8, 8, 4, 32, 32, 11.5, 23.7, 55.5, 16.1, 20.6)};
}

// GSPMD Table 5: Conformer backbones (M=3072, H=12288, N=16 heads) of 32 layers on 8 stages and 64
// on 16, microbatches of one sequence, GPipe and circular. A Transformer stack stands in for the
// Conformer block: its feed-forward of hidden 2 x 12288 does the work of Conformer's two
// half-step feed-forward modules of 12288; the convolution module is not modelled (189M parameters
// a layer against the paper's 202M: 6.05B and 12.1B for 6.47B and 12.95B). The paper gives neither
// the sequence length nor the devices: sequence 1024 and (L, 1, 2) meshes (two in-layer shards per
// stage; docs/reproduce.md).
std::vector<ReproduceColumn> Table5Columns() {
  const PipelineShape small{32, 3072, 2 * 12288, 16, 192}, large{64, 3072, 2 * 12288, 16, 192};
  std::vector<ReproduceColumn> out;
  auto add = [&](const PipelineShape& m, const std::string& size, const std::string& schedule, int64_t l, int64_t n,
                 std::vector<PublishedFigure> published, bool is_small) {
    ReproduceColumn c = PipelinedColumn(m, schedule, l, 1, 2, n, 1, std::move(published), is_small);  // under 1 s each
    c.label = size + " " + c.label;
    out.push_back(std::move(c));
    return out.back().label;
  };
  add(small, "6.47B", "gpipe", 8, 64, {Step(8.40), Memory(13.8), RawUtil(59.4), Bubbles(9.6), Recompute(22.9)}, true);
  const std::string g1 =
      add(small, "6.47B", "gpipe", 8, 16, {Step(2.80), Memory(12.2), RawUtil(57.9), Bubbles(29.9), Recompute(22.3)}, true);
  add(small, "6.47B", "circular", 8, 16,
      {Step(2.30), Memory(14.1), RawUtil(53.9), Bubbles(9.0), Recompute(21.3), Gain(2.80, 2.30)}, true);
  out.back().baseline = g1;
  add(large, "12.95B", "gpipe", 16, 128, {Step(18.37), Memory(15.4), RawUtil(60.5), Bubbles(10.4), Recompute(29.9)}, true);
  const std::string g2 =
      add(large, "12.95B", "gpipe", 16, 32, {Step(5.58), Memory(12.8), RawUtil(59.0), Bubbles(31.0), Recompute(22.8)}, true);
  add(large, "12.95B", "circular", 16, 32,
      {Step(4.42), Memory(14.8), RawUtil(50.6), Bubbles(10.0), Recompute(22.4), Gain(5.58, 4.42)}, true);
  out.back().baseline = g2;
  return out;
}

std::vector<ReproduceCase> BuildCases() {
  std::vector<ReproduceCase> cases;
  {
    ReproduceCase c;
    c.name = "gspmd-table2";
    c.title = "Dense Transformer with wide layers (M=8192, H=65536, N=128, D=256), 2D finalized sharding, TPU v3";
    c.source = "GSPMD paper, Table 2 (validation.md G4)";
    c.columns = {
        Table2Column("64B, 128 devices", 32, 8192, 65536, 128, 256, 64, 8, 16, 5.74, 62.7, 15.3, true),
        Table2Column("64B, 512 devices", 32, 8192, 65536, 128, 256, 256, 16, 32, 6.25, 57.1, 13.3, true),
        Table2Column("64B, 2048 devices", 32, 8192, 65536, 128, 256, 1024, 32, 64, 6.30, 56.9, 15.56, false),
        Table2Column("128B, 2048 devices", 64, 8192, 65536, 128, 256, 512, 32, 64, 6.31, 56.5, 14.0, false),
        Table2Column("256B, 2048 devices", 128, 8192, 65536, 128, 256, 256, 32, 64, 6.71, 54.1, 12.9, false),
        Table2Column("512B, 2048 devices", 256, 8192, 65536, 128, 256, 128, 32, 64, 7.64, 47.5, 13.6, false),
        Table2Column("1T, 2048 devices", 128, 16384, 131072, 256, 256, 128, 32, 64, 12.66, 55.6, 15.8, false),
    };
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "gspmd-table3";
    c.title = "Narrower dense Transformer (M=4096, H=16384, N=64, D=128, 64 layers), 2D finalized sharding, TPU v3";
    c.source = "GSPMD paper, Table 3 and section 5.1";
    // Published: peak memory, step time, FLOPS utilisation; batch 48, 96, 192 on 64, 128, 256 cores.
    c.columns = {Table3Column(4, 16, 48, {4, 8}, 12.4, 3.56, 39.4, true),   Table3Column(8, 16, 96, {8, 8}, 14.6, 3.43, 40.5, true),
                 Table3Column(8, 32, 192, {8, 16}, 14.8, 5.71, 27.1, true), Table3Column(16, 4, 48, {4, 8}, 13.8, 3.10, 45.7, true),
                 Table3Column(16, 8, 96, {8, 8}, 12.7, 3.37, 41.7, true),   Table3Column(32, 8, 192, {8, 16}, 14.1, 3.36, 41.3, true)};
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "gspmd-table4";
    c.title = "Pipelining the 16B narrower Transformer (M=4096, H=16384, N=64, D=128, 64 layers), GPipe + remat, (L,X,Y) meshes, TPU v3";
    c.source = "GSPMD paper, Table 4 and section 5.2 (issue 14)";
    c.columns = Table4Columns();
    c.fastest = {"(4,16,4) 16x64", "(4,16,4) 32x32"};
    c.fastest_text = "4 stages x 4 model-parallel shards is the fastest configuration (section 5.2)";
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "gspmd-table5";
    c.title = "Pipelined Conformer backbones (a Transformer stack stands in), GPipe vs circular, TPU v3";
    c.source = "GSPMD paper, Table 5 and section 5.3 (issue 14); Transformer layers stand in for Conformer blocks";
    c.columns = Table5Columns();
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "gspmd-table6";
    c.title = "Sparse MoE Transformer (GShard), one expert per device, 1-D mesh, TPU v3";
    c.source = "GSPMD paper, Table 6 (validation.md G5)";
    c.columns = {Table6Column(32, {4, 4}, 0.98, 58.2, 10.8, 2, true), Table6Column(128, {8, 8}, 1.01, 49.8, 11.2, 6, false),
                 Table6Column(512, {16, 16}, 1.10, 49.8, 11.2, 9, false),
                 Table6Column(2048, {32, 32}, 1.51, 46.8, 11.6, 11, false)};
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "gspmd-table7";
    c.title = "Hybrid sparse/dense MoE Transformer (E on X, H and N on Y; dense layers as Table 1), TPU v3";
    c.source = "GSPMD paper, Table 7 (H and N read from a garbled copy: docs/zoo.md)";
    c.columns = {Table7Column(8, 4, 32768, 128, 32, 2.12, 55.3, 12.3, true),
                 Table7Column(16, 8, 32768, 128, 128, 2.19, 50.2, 12.9, true),
                 Table7Column(32, 16, 131072, 512, 128, 2.08, 50.8, 11.9, true),
                 Table7Column(64, 32, 131072, 512, 512, 1.92, 53.8, 8.5, false)};
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "gspmd-table8";
    c.title = "3-D U-Net with spatial partitioning (data x spatial mesh), TPU v3";
    c.source = "GSPMD paper, Table 8 (validation.md G6); (1,1) is one core of a two-core chip";
    c.columns = {Table8Column(1, 1, 128, 4, 2.99, 47.9, 14.3, true),   Table8Column(1, 2, 128, 4, 1.56, 43.7, 14.8, true),
                 Table8Column(1, 4, 128, 4, 0.79, 43.5, 7.9, true),    Table8Column(1, 8, 128, 4, 0.39, 43.5, 4.5, true),
                 Table8Column(1, 16, 128, 4, 0.19, 43.8, 2.7, true),   Table8Column(4, 16, 256, 8, 1.66, 20.5, 14.9, false),
                 Table8Column(2, 32, 256, 8, 0.76, 41.2, 8.52, false)};
    // "A 15.7x step time reduction on 16 partitions" (section 5.6): issue 15's bound, 15%.
    ReproduceColumn& sixteen = c.columns[4];
    sixteen.baseline = c.columns[0].label;
    sixteen.published.push_back({ReproduceMetric::kSpeedup, 2.99 / 0.19, 0.15});
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "wus-6.1";
    c.title = "Weight-update sharding: the data-parallel step before and after the pass, TPU v3 (2 cores per chip as replicas)";
    c.source = "Xu et al., automatic cross-replica sharding of weight update, section 6.1 (validation.md W1)";
    c.columns = WeightUpdateShardingColumns();
    cases.push_back(std::move(c));
  }
  {
    ReproduceCase c;
    c.name = "book-collectives";
    c.title = "Collectives on TPU slices, costed by the simulator's collective model";
    c.source = "How To Scale Your Model, part 3 (validation.md C1-C8)";
    c.columns = BookCollectiveColumns();
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string Fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// A figure in the unit people read it in.
std::string FigureText(ReproduceMetric m, double v) {
  switch (m) {
    case ReproduceMetric::kStepTime:
    case ReproduceMetric::kStepBeforePass:
    case ReproduceMetric::kStepAfterPass: return v < 0.1 ? Fixed(1e3 * v, 1) + " ms" : Fixed(v, 2) + " s";
    case ReproduceMetric::kSpeedup: return Fixed(v, 2) + "x";
    case ReproduceMetric::kStepReduction: return Fixed(v, 1) + "%";
    case ReproduceMetric::kPeakMemory: return Fixed(v / kGB, 2) + " GB";
    case ReproduceMetric::kMfu:
    case ReproduceMetric::kAllToAllShare:
    case ReproduceMetric::kBubbleShare:
    case ReproduceMetric::kRecomputeShare:
    case ReproduceMetric::kRawUtilization: return Fixed(v, 1) + "%";
    case ReproduceMetric::kCollectiveTime: return v < 1e-3 ? Fixed(1e6 * v, v < 1e-5 ? 2 : 1) + " us" : Fixed(1e3 * v, 2) + " ms";
    case ReproduceMetric::kTimeRatio: return Fixed(v, 3);
  }
  return Fixed(v, 3);
}

bool IsPercentage(ReproduceMetric m) {
  return m == ReproduceMetric::kMfu || m == ReproduceMetric::kAllToAllShare || m == ReproduceMetric::kStepReduction ||
         m == ReproduceMetric::kBubbleShare || m == ReproduceMetric::kRecomputeShare || m == ReproduceMetric::kRawUtilization;
}

void Compare(ReproducedValue* v) {
  const PublishedFigure& p = v->published;
  v->difference_percent = p.value != 0 ? 100 * (v->simulated - p.value) / p.value : 0;
  v->difference_points = v->simulated - p.value;
  v->within_tolerance = IsPercentage(p.metric) ? std::abs(v->difference_points) <= p.tolerance
                                               : std::abs(v->difference_percent) <= 100 * p.tolerance;
}

// A weight-update-sharding column: the paper case simulated before and after the pass.
Status RunWeightUpdateShardingColumn(const ReproduceColumn& col, const std::optional<AllReduceCombinerOptions>& combiner,
                                     ReproducedColumn* out) {
  const WeightUpdateShardingPaperCase* found = nullptr;
  static const std::vector<WeightUpdateShardingPaperCase> cases = WeightUpdateShardingPaperCases();
  for (const auto& c : cases)
    if (c.id == col.weight_update_sharding_case) found = &c;
  if (!found) return Error("no weight-update-sharding case '" + col.weight_update_sharding_case + "'");
  auto r = RunWeightUpdateShardingPaperCase(*found, {}, combiner);
  if (!r.ok()) return r.error();
  out->step_before_pass_s = r->before_s;
  out->step_time_s = r->after_s;
  out->peak_memory_bytes = r->after_peak;
  out->device_hbm_bytes = static_cast<double>(r->device_hbm_bytes);
  out->fits = r->device_hbm_bytes <= 0 || r->after_peak <= r->device_hbm_bytes;
  return Status::Ok();
}

Result<Topology> ColumnSlice(const ReproduceColumn& col, DeviceMesh* mesh_out) {
  auto chip = ResolveChip(col.chip);
  if (!chip.ok()) return chip.error();
  auto spec = WithCoresPerChip(chip.value(), col.cores_per_chip);
  if (!spec.ok()) return spec.error();
  auto mesh = DeviceMesh::Parse(col.mesh);
  if (!mesh.ok()) return Error("mesh '" + col.mesh + "': " + mesh.error().message);
  *mesh_out = mesh.value();
  return Topology::ForMesh(spec.value(), mesh.value(), col.slice);
}

// The figures of a zoo configuration's simulated step; `all_to_all` gets its all-to-all seconds.
void FillFromRun(const RunResult& run, ReproducedColumn* out, double* all_to_all) {
  out->step_time_s = run.summary.step_time_s;
  out->mfu_percent = 100 * run.summary.mfu;
  out->raw_utilization_percent = 100 * run.summary.raw_flops_utilization;
  out->bubble_percent = 100 * run.summary.bubble_share();
  out->recompute_percent = 100 * run.summary.recompute_share();
  out->peak_memory_bytes = run.summary.peak_memory_bytes;
  out->device_hbm_bytes = static_cast<double>(run.summary.device_hbm_bytes);
  out->fits = run.summary.fits();
  for (const CollectiveRecord& c : run.collectives) {
    if (c.kind.rfind("all-to-all", 0) == 0) *all_to_all += c.time_s;
  }
}

void SetValues(const ReproduceColumn& col, double all_to_all, double book_figure, ReproducedColumn* out);

ReproducedColumn RunColumn(const ReproduceColumn& col, const ReproduceOptions& options, const CancellationToken& cancel) {
  ReproducedColumn out;
  out.column = &col;
  double all_to_all = 0, book_figure = 0;
  if (!col.book_collective_case.empty()) {
    static const std::vector<BookCollectiveCase> cases = BookCollectiveCases();
    const BookCollectiveCase* found = nullptr;
    for (const BookCollectiveCase& b : cases)
      if (b.id == col.book_collective_case) found = &b;
    if (!found) {
      out.status = Error("no book collective case " + col.book_collective_case);
      return out;
    }
    auto figure = SimulateBookCollective(*found);
    if (!figure.ok()) {
      out.status = figure.error();
      return out;
    }
    book_figure = *figure;
  } else if (!col.weight_update_sharding_case.empty()) {
    if (Status st = RunWeightUpdateShardingColumn(col, options.all_reduce_combiner, &out); !st.ok()) {
      out.status = st;
      return out;
    }
  } else {
    auto simulated = SimulateZooConfiguration(col, cancel, options.all_reduce_combiner);
    if (!simulated.ok()) {
      out.status = simulated.error();
      return out;
    }
    FillFromRun(simulated.value(), &out, &all_to_all);
  }
  SetValues(col, all_to_all, book_figure, &out);
  return out;
}

// Each published figure of `col` beside the simulated one.
void SetValues(const ReproduceColumn& col, double all_to_all, double book_figure, ReproducedColumn* out_ptr) {
  ReproducedColumn& out = *out_ptr;
  const double before = out.step_before_pass_s, after = out.step_time_s;
  for (const PublishedFigure& p : col.published) {
    ReproducedValue v;
    v.published = p;
    switch (p.metric) {
      case ReproduceMetric::kStepTime: v.simulated = out.step_time_s; break;
      case ReproduceMetric::kMfu: v.simulated = out.mfu_percent; break;
      case ReproduceMetric::kPeakMemory: v.simulated = static_cast<double>(out.peak_memory_bytes); break;
      case ReproduceMetric::kAllToAllShare:
        v.simulated = out.step_time_s > 0 ? 100 * all_to_all / out.step_time_s : 0;
        break;
      case ReproduceMetric::kStepBeforePass: v.simulated = before; break;
      case ReproduceMetric::kStepAfterPass: v.simulated = after; break;
      case ReproduceMetric::kSpeedup: v.simulated = after > 0 ? before / after : 0; break;
      case ReproduceMetric::kStepReduction: v.simulated = before > 0 ? 100 * (1 - after / before) : 0; break;
      case ReproduceMetric::kCollectiveTime:
      case ReproduceMetric::kTimeRatio: v.simulated = book_figure; break;
      case ReproduceMetric::kBubbleShare: v.simulated = out.bubble_percent; break;
      case ReproduceMetric::kRecomputeShare: v.simulated = out.recompute_percent; break;
      case ReproduceMetric::kRawUtilization: v.simulated = out.raw_utilization_percent; break;
    }
    Compare(&v);
    out.values.push_back(v);
  }
}

}  // namespace

ReproducedColumn CompareWithPublished(const ReproduceColumn& configuration, const sim::RunResult& run) {
  ReproducedColumn out;
  out.column = &configuration;
  double all_to_all = 0;
  FillFromRun(run, &out, &all_to_all);
  SetValues(configuration, all_to_all, 0, &out);
  return out;
}

std::string ReproduceFigureText(ReproduceMetric metric, double value) { return FigureText(metric, value); }

std::string ReproduceDifferenceText(const ReproducedValue& v) {
  const bool points = IsPercentage(v.published.metric);
  char text[48];
  std::snprintf(text, sizeof text, "%+.1f%s", points ? v.difference_points : v.difference_percent, points ? " pts" : "%");
  return text;
}

Result<sim::RunResult> SimulateZooConfiguration(const ReproduceColumn& col, const CancellationToken& cancel,
                                                const std::optional<AllReduceCombinerOptions>& combiner) {
  DeviceMesh mesh;
  auto topology = ColumnSlice(col, &mesh);
  if (!topology.ok()) return topology.error();
  auto module = ZooBuild(col.model, col.settings);
  if (!module.ok()) return Error(col.model + ": " + module.error().message);
  PipelineOptions o;
  o.propagation = StandardPropagationOptions(EntryIo::kShard);
  o.partitioning = Partitioning::kAlways;
  o.all_reduce_combiner = combiner;
  o.topology = topology.value();
  SimulationOptions so;
  so.mesh_text = mesh.ToString();
  so.label = col.label;
  o.simulation = so;
  auto r = RunPipeline(std::move(module).value(), o, cancel);
  if (!r.ok()) return Error(r.FailureText());
  return std::move(r.simulation->run);
}

Result<TwinVerification> VerifyColumnOnSmallTwin(const ReproduceColumn& column, const CancellationToken& cancel) {
  if (column.model.empty() || !column.weight_update_sharding_case.empty() || !column.book_collective_case.empty())
    return Error(column.label + " is not a zoo configuration");
  auto full = ZooBuild(column.model, column.settings);
  if (!full.ok()) return full.error();
  auto propagated = Propagate(**full, StandardPropagationOptions(), cancel);
  if (!propagated.ok()) return Error("propagating " + column.label + ": " + propagated.error().message);
  return VerifySmallTwin(column.model, column.settings, **full, (*full)->num_partitions, TwinVerifyLimits(), cancel);
}

namespace {
// The largest multiple of `step` up to `limit` that fits: doubling from one step, then bisection
// between the last fitting and the first failing multiple. `fits(batch, &peak)`; an error stops the
// search (out.error).
template <typename Fits>
void LargestFitting(int64_t step, int64_t limit, Fits&& fits, MaxBatchResult& out) {
  int64_t good = 0, bad = 0, peak = 0;
  for (int64_t k = 1; k * step <= limit; k *= 2) {
    auto f = fits(k * step, &peak);
    if (!f.ok()) {
      out.error = f.error().message;
      return;
    }
    if (!f.value()) {
      bad = k;
      out.next_batch = k * step;
      out.next_peak_bytes = peak;
      break;
    }
    good = k;
    out.batch = k * step;
    out.peak_memory_bytes = peak;
  }
  if (bad == 0) {
    out.reached_limit = true;
    return;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    auto f = fits(mid * step, &peak);
    if (!f.ok()) {
      out.error = f.error().message;
      return;
    }
    if (f.value()) {
      good = mid;
      out.batch = mid * step;
      out.peak_memory_bytes = peak;
    } else {
      bad = mid;
      out.next_batch = mid * step;
      out.next_peak_bytes = peak;
    }
  }
}
}  // namespace

Result<MaxBatchResult> FindMaxBatch(ReproduceColumn configuration, int64_t step, int64_t limit, const CancellationToken& cancel) {
  if (step < 1) return Error("the batch step must be at least 1");
  if (limit < step) return Error("the batch limit " + std::to_string(limit) + " is below the step " + std::to_string(step));
  MaxBatchResult out;
  // The batch setting: "batch", or a pipelined model's microbatch size (at its microbatch count).
  const auto models = ZooList();
  const ZooModel* model = nullptr;
  for (const ZooModel& m : models)
    if (m.name == configuration.model) model = &m;
  if (!model) return Error("unknown zoo model '" + configuration.model + "'");
  auto parameter = [&](std::string_view name) -> const ZooParameter* {
    for (const ZooParameter& p : model->parameters)
      if (p.name == name) return &p;
    return nullptr;
  };
  if (!parameter("batch")) {
    const ZooParameter* microbatches = parameter("microbatches");
    if (!parameter("microbatch") || !microbatches)
      return Error("model " + configuration.model + " has no batch setting (batch, or microbatch and microbatches)");
    auto it = configuration.settings.find("microbatches");
    const std::string text = it != configuration.settings.end() ? it->second : microbatches->default_value;
    int64_t n = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || ptr != text.data() + text.size() || n < 1)
      return Error("microbatches must be a positive integer, found '" + text + "'");
    out.setting = "microbatch";
    out.per_setting = n;
  }
  // Simulates `batch` (of the setting); true when it fits.
  auto fits = [&](int64_t batch, int64_t* peak) -> Result<bool> {
    configuration.settings[out.setting] = std::to_string(batch);
    auto run = SimulateZooConfiguration(configuration, cancel);
    if (!run.ok()) return Error(out.setting + " " + std::to_string(batch) + ": " + run.error().message);
    ++out.simulations;
    out.device_hbm_bytes = run->summary.device_hbm_bytes;
    *peak = run->summary.peak_memory_bytes;
    return run->summary.fits();
  };
  LargestFitting(step, limit, fits, out);
  if (!out.error.empty()) return Error(out.error);
  out.batch *= out.per_setting;
  out.next_batch *= out.per_setting;
  return out;
}

Result<MaxBatchResult> FindMaxBatchOfModule(const Module& module, const std::string& dim, const ReproduceColumn& pod,
                                            int64_t limit, const CancellationToken& cancel) {
  auto classes = EntryParameterDimensionClasses(module);
  if (!classes.ok()) return classes.error();
  int64_t size = 0;
  for (const DimensionClass& c : *classes)
    if (std::find(c.dims.begin(), c.dims.end(), dim) != c.dims.end()) size = c.size;
  if (size < 1) return Error("'" + dim + "' is not a dimension of an entry parameter (PARAMETER:DIM, e.g. x:0)");
  if (limit < size) return Error("the batch limit " + std::to_string(limit) + " is below " + dim + "'s size " + std::to_string(size));
  DeviceMesh mesh;
  auto topology = ColumnSlice(pod, &mesh);
  if (!topology.ok()) return topology.error();
  MaxBatchResult out;
  out.setting = dim;
  // Whole multiples of the dimension's size: each a scaled copy of the module, partitioned and simulated.
  auto fits = [&](int64_t batch, int64_t* peak) -> Result<bool> {
    ScaleDimsOptions scaling;
    scaling.factors[dim] = batch / size;
    auto scaled = ScaleModuleDims(module, 1, scaling);
    if (!scaled.ok()) return Error(dim + " " + std::to_string(batch) + ": " + scaled.error().message);
    scaled->module->num_partitions = topology->num_devices();
    PipelineOptions o;
    o.propagation = StandardPropagationOptions(EntryIo::kShard);
    o.partitioning = Partitioning::kAlways;
    o.topology = topology.value();
    SimulationOptions so;
    so.mesh_text = mesh.ToString();
    so.label = module.name() + " at " + dim + " = " + std::to_string(batch);
    o.simulation = so;
    auto r = RunPipeline(std::move(scaled->module), o, cancel);
    if (!r.ok()) return Error(dim + " " + std::to_string(batch) + ": " + r.FailureText());
    ++out.simulations;
    out.device_hbm_bytes = r.simulation->run.summary.device_hbm_bytes;
    *peak = r.simulation->run.summary.peak_memory_bytes;
    return r.simulation->run.summary.fits();
  };
  LargestFitting(size, limit, fits, out);
  if (!out.error.empty()) return Error(out.error);
  return out;
}

const std::vector<ReproduceCase>& ReproduceCases() {
  static const std::vector<ReproduceCase> cases = BuildCases();
  return cases;
}

Result<const ReproduceCase*> FindReproduceCase(std::string_view name) {
  std::string names;
  for (const ReproduceCase& c : ReproduceCases()) {
    if (c.name == name) return &c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  return Error("no reproduction case '" + std::string(name) + "' (known: " + names + ")");
}

ReproducedCase RunReproduceCase(const ReproduceCase& spec, const ReproduceOptions& options, const CancellationToken& cancel) {
  ReproducedCase r;
  r.spec = &spec;
  std::map<std::string, double> baseline_steps;  // columns run only as another's baseline
  for (const ReproduceColumn& col : spec.columns) {
    if (options.small_only && !col.small) continue;
    if (!options.only_column.empty() && col.label != options.only_column) continue;
    if (cancel.cancelled()) break;
    if (options.on_column) options.on_column(col);
    ReproducedColumn c = RunColumn(col, options, cancel);
    // A gain over another column: that column's step (run here when it was not run above).
    if (!col.baseline.empty() && c.status.ok()) {
      double base = 0;
      for (const ReproducedColumn& done : r.columns)
        if (done.column->label == col.baseline && done.status.ok()) base = done.step_time_s;
      if (base <= 0 && baseline_steps.count(col.baseline)) base = baseline_steps[col.baseline];
      for (const ReproduceColumn& other : spec.columns)
        if (base <= 0 && other.label == col.baseline && !cancel.cancelled()) {
          if (options.on_column) options.on_column(other);
          ReproducedColumn b = RunColumn(other, options, cancel);
          if (b.status.ok()) base = baseline_steps[col.baseline] = b.step_time_s;
        }
      for (ReproducedValue& v : c.values) {
        if (v.published.metric == ReproduceMetric::kStepReduction) {
          v.simulated = base > 0 ? 100 * (1 - c.step_time_s / base) : 0;
          Compare(&v);
        } else if (v.published.metric == ReproduceMetric::kSpeedup) {
          v.simulated = base > 0 && c.step_time_s > 0 ? base / c.step_time_s : 0;
          Compare(&v);
        }
      }
    }
    for (const ReproducedValue& v : c.values) {
      ++r.checked;
      if (v.within_tolerance) ++r.within;
      r.worst_percent = std::max(r.worst_percent, std::abs(v.difference_percent));
    }
    r.columns.push_back(std::move(c));
  }
  // The published observation on the fastest column.
  if (!spec.fastest.empty()) {
    const ReproducedColumn* best = nullptr;
    bool named_ran = false;
    for (const ReproducedColumn& c : r.columns) {
      if (!c.status.ok() || c.step_time_s <= 0) continue;
      named_ran = named_ran || std::find(spec.fastest.begin(), spec.fastest.end(), c.column->label) != spec.fastest.end();
      if (!best || c.step_time_s < best->step_time_s) best = &c;
    }
    if (best && named_ran && r.columns.size() > 1) {
      r.fastest_label = best->column->label;
      r.fastest_checked = true;
      r.fastest_as_published = std::find(spec.fastest.begin(), spec.fastest.end(), r.fastest_label) != spec.fastest.end();
      ++r.checked;
      if (r.fastest_as_published) ++r.within;
    }
  }
  return r;
}

std::string ReproduceTableText(const ReproducedCase& r) {
  std::ostringstream os;
  os << r.spec->name << ": " << r.spec->title << "\n";
  os << "source: " << r.spec->source << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %-17s %12s %12s %10s  %s\n", "column", "figure", "published", "simulated",
                "difference", "tolerance");
  os << line;
  for (const ReproducedColumn& c : r.columns) {
    if (!c.status.ok()) {
      os << c.column->label << ": error: " << c.status.error().message << "\n";
      continue;
    }
    for (const ReproducedValue& v : c.values) {
      const ReproduceMetric m = v.published.metric;
      const std::string diff = ReproduceDifferenceText(v);
      const double t = IsPercentage(m) ? v.published.tolerance : 100 * v.published.tolerance;
      const std::string tol = Fixed(t, t == std::floor(t) ? 0 : 1) + (IsPercentage(m) ? " pts" : "%");
      std::snprintf(line, sizeof line, "%-22s %-17s %12s %12s %10s  %s %s\n", c.column->label.c_str(),
                    std::string(ReproduceMetricName(m)).c_str(), FigureText(m, v.published.value).c_str(),
                    FigureText(m, v.simulated).c_str(), diff.c_str(), v.within_tolerance ? "within" : "OUTSIDE", tol.c_str());
      os << line;
    }
    if (!c.column->weight_update_sharding_case.empty() && c.step_time_s > 0) {
      os << c.column->label << ": step " << Fixed(1e3 * c.step_before_pass_s, 1) << " ms -> " << Fixed(1e3 * c.step_time_s, 1)
         << " ms with the pass ("
         << Fixed(c.step_before_pass_s / c.step_time_s, 2) << "x, " << Fixed(100 * (1 - c.step_time_s / c.step_before_pass_s), 1)
         << "% shorter; " << c.column->weight_update_sharding_case << ")\n";
    }
    if (!c.fits) {
      os << c.column->label << ": does not fit: peak " << Fixed(static_cast<double>(c.peak_memory_bytes) / kGB, 2) << " GB > "
         << Fixed(c.device_hbm_bytes / kGB, 2) << " GB of HBM per device ("
         << Fixed((static_cast<double>(c.peak_memory_bytes) - c.device_hbm_bytes) / kGB, 2) << " GB missing)\n";
    }
  }
  if (r.fastest_checked) {
    os << "fastest: " << r.fastest_label << " (paper: " << r.spec->fastest_text << "): "
       << (r.fastest_as_published ? "as published" : "NOT as published") << "\n";
  }
  os << "within tolerance: " << r.within << " of " << r.checked << "\n";
  os << "worst: " << Fixed(r.worst_percent, 1) << "%\n";
  return os.str();
}

std::string ReproduceCsv(const ReproducedCase& r) {
  std::ostringstream os;
  os << "case,column,metric,published,simulated,difference_percent,tolerance,within,fits\n";
  for (const ReproducedColumn& c : r.columns) {
    for (const ReproducedValue& v : c.values) {
      os << r.spec->name << ",\"" << c.column->label << "\"," << ReproduceMetricName(v.published.metric) << ","
         << v.published.value << "," << v.simulated << "," << Fixed(v.difference_percent, 2) << "," << v.published.tolerance
         << "," << (v.within_tolerance ? 1 : 0) << "," << (c.fits ? 1 : 0) << "\n";
    }
  }
  return os.str();
}

}  // namespace shardscope::pipeline

// Halo exchange in the SPMD partitioner (GSPMD §3.3 / §4.3, Figure 6, Appendix A.2): windowed ops
// keep their spatial dimension sharded and fetch the boundary rows they need from their
// neighbours with collective-permutes — convolution (1-D/2-D, stride 1 and 2, SAME/VALID, window
// dilation, base dilation, uneven shards, halos wider than a shard, filter gradients),
// reduce-window (max/add, stride 1/2), pad and slice along the sharded dim — plus batch-, feature-
// and contracting-sharded convolutions; reverse and uneven reshapes along a sharded dim, base-
// dilated windows with stride > 1 at different phases per tile (explicit dilation) and kernel-
// sharded base-dilated convolutions, none of which gathers. Every program is verified numerically
// against the unpartitioned module (sweeps of about 5,000 configurations included).
#include <QtTest>

#include <optional>
#include <string>
#include <vector>

#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "tests/spmd_test_support.h"
#include "partitioner/spmd/halo.h"
#include "partitioner/spmd/spmd_partitioner.h"

using namespace shardscope;

namespace {

using testing::Find;

// Parses, partitions and verifies numerically (seed 7); nullopt with the reason in *why on failure.
std::optional<PartitionResult> PartitionAndVerify(const std::string& hlo, int64_t devices, std::string* why) {
  return testing::PartitionAndVerify(hlo, devices, why);
}

std::string Pairs(const std::vector<std::pair<int64_t, int64_t>>& p) {
  std::string s = "{";
  for (size_t i = 0; i < p.size(); ++i) s += (i ? ",{" : "{") + std::to_string(p[i].first) + "," + std::to_string(p[i].second) + "}";
  return s + "}";
}

// Source->target pairs of a halo hop along a 1-D device order 0..n-1: `hop` > 0 brings data from
// `hop` tiles to the left, < 0 from the right.
std::string HopPairs(int64_t n, int64_t hop) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t j = 0; j < n; ++j)
    if (j - hop >= 0 && j - hop < n) p.emplace_back(j - hop, j);
  std::sort(p.begin(), p.end());
  return Pairs(p);
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// A 1-D convolution f32[B,W,C] (b0f) * f32[K,C,4] (0io) -> f32[B,O,4], input and output sharded on
// the spatial dim over `devices`, kernel replicated.
std::string Conv1D(int64_t W, int64_t devices, int64_t K, int64_t stride, int64_t lo, int64_t hi, int64_t dilation,
                   int64_t B, int64_t C) {
  const int64_t D = (K - 1) * dilation + 1;
  const int64_t O = (W + lo + hi - D) / stride + 1;
  const std::string ds = std::to_string(devices);
  std::string window = "size=" + std::to_string(K) + " stride=" + std::to_string(stride) + " pad=" + std::to_string(lo) +
                       "_" + std::to_string(hi) + " rhs_dilate=" + std::to_string(dilation);
  return "HloModule conv1d\nENTRY e {\n"
         "  x = f32[" + std::to_string(B) + "," + std::to_string(W) + "," + std::to_string(C) + "] parameter(0), "
         "sharding={devices=[1," + ds + ",1]<=[" + ds + "]}\n"
         "  k = f32[" + std::to_string(K) + "," + std::to_string(C) + ",4] parameter(1), sharding={replicated}\n"
         "  ROOT y = f32[" + std::to_string(B) + "," + std::to_string(O) + ",4] convolution(x, k), window={" + window + "}, "
         "dim_labels=b0f_0io->b0f, sharding={devices=[1," + ds + ",1]<=[" + ds + "]}\n}\n";
}

}  // namespace

class SpmdHaloTest : public QObject {
  Q_OBJECT
 private slots:
  // The arithmetic of Appendix A.2 (Figure 9): windows of 5 over shards of 3 (10 elements over 4
  // tiles, the last shard padded): one row from each neighbour, and the last tile's window
  // reaches into the padding, which must be masked.
  void planUnevenWindows() {
    auto pieces = [](const spmd::HaloPlan& p) {
      std::string t;
      for (const auto& pc : p.pieces) t += std::to_string(pc.hop) + ":" + std::to_string(pc.from) + "-" + std::to_string(pc.to) + " ";
      return t;
    };
    const spmd::HaloPlan p = spmd::PlanHalo(3, 4, 10, {-1, 2, 5, 8}, 5, true, true);
    // The last row of the left neighbour, the own shard, the first row of the right neighbour.
    QCOMPARE(pieces(p), std::string("-1:2-3 0:0-3 1:0-1 "));
    QCOMPARE(p.permutes, int64_t{2});
    QCOMPARE(p.rows_received, int64_t{2});
    QCOMPARE(p.pad_low + p.pad_high, int64_t{0});
    QVERIFY(!p.dynamic);
    QVERIFY(!p.mask_low);  // the zeros a collective-permute delivers are the pad value
    QVERIFY(p.mask_high);  // positions 10, 11 are the padding of the last shard
    QVERIFY(p.cheaper_than_gather());
    // Non-constant halo sizes (Figure 9a: right halos 1, 2, 3, 4): the maximum is exchanged and a
    // dynamic-slice picks each device's window.
    const spmd::HaloPlan q = spmd::PlanHalo(4, 4, 32, {0, 5, 10, 15}, 5, true, true);
    QCOMPARE(pieces(q), std::string("0:0-4 1:0-4 "));
    QVERIFY(q.dynamic);
    QCOMPARE(q.offsets, (std::vector<int64_t>{0, 1, 2, 3}));
    // Windows wider than a shard reach two tiles away; the links then carry more than a gather
    // (rows x hops 8 > 3 shards of 2 rows).
    const spmd::HaloPlan w = spmd::PlanHalo(2, 4, 8, {-3, -1, 1, 3}, 8, true, true);
    QCOMPARE(pieces(w), std::string("-2:1-2 -1:0-2 0:0-2 1:0-2 2:0-1 "));
    QCOMPARE(w.permutes, int64_t{4});
    QCOMPARE(w.link_rows, int64_t{8});
    QVERIFY(!w.cheaper_than_gather());
    // A shift (after a slice): tile 1 needs element 1, held by tile 0; tiles 2 and 3 hold only
    // the output's padding (need 0): one row crosses one link instead of a whole shard.
    const spmd::HaloPlan sh = spmd::PlanHalo(128, 4, 512, {0, 1, 2, 3}, 1, true, true, {1, 1, 0, 0});
    QCOMPARE(pieces(sh), std::string("-1:1-2 0:0-1 "));
    QCOMPARE(sh.link_rows, int64_t{1});
    QCOMPARE(sh.offsets[0], int64_t{1});
    QCOMPARE(sh.offsets[1], int64_t{0});
    // From a whole (replicated) dimension: a pad + dynamic-slice, nothing received.
    const spmd::HaloPlan r = spmd::PlanHalo(16, 2, 16, {-1, 7}, 10, false, true);
    QCOMPARE(r.rows_received, int64_t{0});
    QCOMPARE(r.pad_low, int64_t{1});
    QCOMPARE(r.pad_high, int64_t{1});
    QCOMPARE(r.offsets, (std::vector<int64_t>{0, 8}));
  }

  // 1-D convolutions with the spatial dim sharded: every collective is a halo collective-permute
  // of the expected width and pairs, nothing is all-gathered, and the local convolution sees the
  // input window (shard + halos) and produces its output shard.
  void conv1D_data() {
    QTest::addColumn<int>("W");
    QTest::addColumn<int>("devices");
    QTest::addColumn<int>("K");
    QTest::addColumn<int>("stride");
    QTest::addColumn<int>("lo");
    QTest::addColumn<int>("hi");
    QTest::addColumn<int>("dilation");
    // Halo pieces, in order of creation: "L<rows>@<hop>" / "R<rows>@<hop>".
    QTest::addColumn<QStringList>("pieces");
    QTest::addColumn<int>("local_in");   // per-device input window
    QTest::addColumn<int>("local_out");  // per-device output shard
    QTest::addColumn<bool>("dynamic");   // a dynamic-slice picks per-device windows
    QTest::addColumn<bool>("masked");    // a select masks positions outside the array
    QTest::newRow("stride 1 SAME, 16 over 2") << 16 << 2 << 3 << 1 << 1 << 1 << 1 << QStringList{"L1@1", "R1@1"} << 10
                                              << 8 << false << false;
    QTest::newRow("stride 1 VALID, 16 over 4") << 16 << 4 << 3 << 1 << 0 << 0 << 1 << QStringList{"R2@1"} << 6 << 4
                                               << false << false;
    QTest::newRow("stride 2 SAME, 16 over 2") << 16 << 2 << 3 << 2 << 0 << 1 << 1 << QStringList{"R1@1"} << 9 << 4
                                              << false << false;
    QTest::newRow("stride 2 pad 1_1, 16 over 4") << 16 << 4 << 3 << 2 << 1 << 1 << 1 << QStringList{"L1@1"} << 5 << 2
                                                 << false << false;
    QTest::newRow("uneven 10 over 4, SAME") << 10 << 4 << 3 << 1 << 1 << 1 << 1 << QStringList{"L1@1", "R1@1"} << 5 << 3
                                            << false << true;
    QTest::newRow("uneven 10 over 4, stride 2 VALID") << 10 << 4 << 3 << 2 << 0 << 0 << 1 << QStringList{"L3@1"} << 3
                                                      << 1 << true << false;
    QTest::newRow("halo wider than a shard, 16 over 4, K=11") << 16 << 4 << 11 << 1 << 5 << 5 << 1
                                                              << QStringList{"L1@2", "L4@1", "R4@1", "R1@2"} << 14
                                                              << 4 << false << false;
    QTest::newRow("window dilation 2, 16 over 2") << 16 << 2 << 3 << 1 << 2 << 2 << 2 << QStringList{"L2@1", "R2@1"}
                                                  << 12 << 8 << false << false;
  }
  void conv1D() {
    QFETCH(int, W);
    QFETCH(int, devices);
    QFETCH(int, K);
    QFETCH(int, stride);
    QFETCH(int, lo);
    QFETCH(int, hi);
    QFETCH(int, dilation);
    QFETCH(QStringList, pieces);
    QFETCH(int, local_in);
    QFETCH(int, local_out);
    QFETCH(bool, dynamic);
    QFETCH(bool, masked);
    const int64_t B = 2, C = 3;
    std::string why;
    auto r = PartitionAndVerify(Conv1D(W, devices, K, stride, lo, hi, dilation, B, C), devices, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QVERIFY(r->replicated_fallbacks.empty());
    QCOMPARE(r->collectives.size(), static_cast<size_t>(pieces.size()));
    for (int i = 0; i < pieces.size(); ++i) {
      const auto& c = r->collectives[static_cast<size_t>(i)];
      const std::string piece = pieces[i].toStdString();
      const bool left = piece[0] == 'L';
      const int64_t rows = std::stoll(piece.substr(1, piece.find('@') - 1));
      const int64_t hop = std::stoll(piece.substr(piece.find('@') + 1));
      QCOMPARE(c.kind, Opcode::kCollectivePermute);
      QVERIFY2(StartsWith(c.reason, "halo exchange: convolution dim 1 " + std::string(left ? "left" : "right") + " halo " +
                                        std::to_string(rows) + " row"),
               c.reason.c_str());
      QCOMPARE(c.replica_groups, HopPairs(devices, left ? hop : -hop));
      QCOMPARE(c.bytes_per_device, B * rows * C * 4);  // rows x batch x features x f32
    }
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs.size(), size_t{1});
    QCOMPARE(convs[0]->operand(0)->shape().dims, (std::vector<int64_t>{B, local_in, C}));
    QCOMPARE(convs[0]->shape().dims, (std::vector<int64_t>{B, local_out, 4}));
    QCOMPARE(convs[0]->window.dims[0].padding_low, int64_t{0});
    QCOMPARE(convs[0]->window.dims[0].padding_high, int64_t{0});
    bool has_ds = false;
    for (const Instruction* ds : Find(*r->module, Opcode::kDynamicSlice))
      has_ds |= ds->shape().rank() == 3 && ds->shape().dim(1) == local_in;
    QCOMPARE(has_ds, dynamic);
    QCOMPARE(convs[0]->operand(0)->opcode() == Opcode::kSelect, masked);
  }

  // Every combination of extent, device count, window size, stride, padding (including negative),
  // base and window dilation — for convolution and reduce-window (add and max) — partitions into
  // a program equal to the unpartitioned module.
  void sweepVerifiesNumerically() {
    int checked = 0, halo_programs = 0;
    for (int64_t W : {7, 10, 16})
      for (int64_t devices : {2, 4})
        for (int64_t K : {1, 3, 4})
          for (int64_t stride : {1, 2, 3})
            for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 1}, {2, 0}, {0, -1}})
              for (int64_t bd : {1, 2})
                for (int64_t wd : {1, 2}) {
                  const int64_t dilated_in = (W - 1) * bd + 1 + lo + hi, D = (K - 1) * wd + 1;
                  if (dilated_in < D) continue;
                  const int64_t O = (dilated_in - D) / stride + 1;
                  const std::string ds = std::to_string(devices);
                  const std::string win = "size=" + std::to_string(K) + " stride=" + std::to_string(stride) + " pad=" +
                                          std::to_string(lo) + "_" + std::to_string(hi) + " lhs_dilate=" +
                                          std::to_string(bd) + " rhs_dilate=" + std::to_string(wd);
                  const std::string sh = "sharding={devices=[1," + ds + ",1]<=[" + ds + "]}";
                  const std::string conv = "HloModule s\nENTRY e {\n  x = f32[2," + std::to_string(W) + ",3] parameter(0), " +
                                           sh + "\n  k = f32[" + std::to_string(K) +
                                           ",3,2] parameter(1), sharding={replicated}\n  ROOT y = f32[2," +
                                           std::to_string(O) + ",2] convolution(x, k), window={" + win +
                                           "}, dim_labels=b0f_0io->b0f, " + sh + "\n}\n";
                  const std::string rwin = "size=1x" + std::to_string(K) + "x1 stride=1x" + std::to_string(stride) +
                                           "x1 pad=0_0x" + std::to_string(lo) + "_" + std::to_string(hi) +
                                           "x0_0 lhs_dilate=1x" + std::to_string(bd) + "x1 rhs_dilate=1x" +
                                           std::to_string(wd) + "x1";
                  for (const char* op : {"add", "maximum"}) {
                    const std::string rw = std::string("HloModule s\nr { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                                                       "  ROOT c = f32[] ") + op + "(a, b) }\nENTRY e {\n  x = f32[2," +
                                           std::to_string(W) + ",3] parameter(0), " + sh +
                                           "\n  i = f32[] constant(0)\n  ROOT y = f32[2," + std::to_string(O) +
                                           ",3] reduce-window(x, i), window={" + rwin + "}, to_apply=r, " + sh + "\n}\n";
                    for (const std::string* hlo : {&conv, &rw}) {
                      if (hlo == &conv && std::string(op) == "maximum") continue;
                      std::string why;
                      auto r = PartitionAndVerify(*hlo, devices, &why);
                      QVERIFY2(r.has_value(), (*hlo + why).c_str());
                      ++checked;
                      bool halo = false;
                      for (const auto& c : r->collectives) halo |= StartsWith(c.reason, "halo exchange");
                      halo_programs += halo;
                    }
                  }
                }
    qInfo("%d programs verified, %d with halo exchange", checked, halo_programs);
    QVERIFY(checked > 1000);
    QVERIFY(halo_programs > checked / 2);
  }

  // Filter-gradient convolutions (input and kernel sharded on the spatial dim, the output whole)
  // for every extent, kernel size, padding, window dilation, stride and window reversal.
  void sweepKernelShardedVerifiesNumerically() {
    int checked = 0, halo_programs = 0, dilated = 0, dilated_halo = 0;
    for (int64_t W : {8, 11, 16})
      for (int64_t devices : {2, 4})
        for (int64_t K : {3, 5, 8})
          for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 1}, {0, -1}, {2, 1}})
            for (int64_t wd : {1, 2})
              for (int64_t stride : {1, 2})
                for (bool reversal : {false, true})
                  for (int64_t bd : {1, 2, 3}) {
                  if (bd > 1 && (reversal || wd > 1)) continue;  // keep the sweep's size
                  const int64_t dilated_in = (W - 1) * bd + 1 + lo + hi, D = (K - 1) * wd + 1;
                  if (dilated_in < D) continue;
                  const int64_t O = (dilated_in - D) / stride + 1;
                  const std::string ds = std::to_string(devices);
                  const std::string sh = "sharding={devices=[1," + ds + ",1]<=[" + ds + "]}";
                  const std::string hlo = "HloModule g\nENTRY e {\n  x = f32[4," + std::to_string(W) + ",2] parameter(0), " +
                                          sh + "\n  g = f32[4," + std::to_string(K) + ",3] parameter(1), " + sh +
                                          "\n  ROOT w = f32[" + std::to_string(O) + ",2,3] convolution(x, g), window={size=" +
                                          std::to_string(K) + " stride=" + std::to_string(stride) + " pad=" +
                                          std::to_string(lo) + "_" + std::to_string(hi) + " lhs_dilate=" +
                                          std::to_string(bd) + " rhs_dilate=" + std::to_string(wd) +
                                          (reversal ? " rhs_reversal=1" : "") +
                                          "}, dim_labels=f0b_i0o->0bf, sharding={replicated}\n}\n";
                  std::string why;
                  auto r = PartitionAndVerify(hlo, devices, &why);
                  QVERIFY2(r.has_value(), (hlo + why).c_str());
                  ++checked;
                  bool halo = false;
                  for (const auto& c : r->collectives) halo |= StartsWith(c.reason, "halo exchange");
                  halo_programs += halo;
                  if (bd > 1) {
                    ++dilated;
                    dilated_halo += halo;
                  }
                }
    qInfo("%d programs verified, %d with halo exchange (base-dilated input: %d of %d)", checked, halo_programs,
          dilated_halo, dilated);
    QVERIFY(checked > 600);
    QVERIFY(halo_programs > 100);
    QVERIFY(dilated > 200);  // base-dilated inputs (kernel gradients of up-sampling: kernelGradientOfUpSampling)
  }

  // Pad and slice along the sharded dim are windowed ops too (window 1, interior padding = base
  // dilation, slice start/stride = negative padding/stride): every extent, padding (negative,
  // interior), pad value (constant or a parameter), slice start/limit/stride verifies.
  void sweepPadAndSliceVerifyNumerically() {
    int checked = 0, halo_programs = 0;
    for (int64_t W : {7, 10, 16})
      for (int64_t devices : {2, 4}) {
        const std::string ds = std::to_string(devices);
        const std::string shx = "sharding={devices=[1," + ds + ",2]<=[" + std::to_string(2 * devices) +
                                "] last_tile_dim_replicate}";
        std::vector<std::string> modules;
        for (int64_t lo : {-2, 0, 1, 3})
          for (int64_t hi : {-1, 0, 2})
            for (int64_t interior : {0, 1, 2})
              for (bool constant : {true, false}) {
                const int64_t out = lo + hi + W + (W - 1) * interior;
                if (out < 1) continue;
                modules.push_back("HloModule p\nENTRY e {\n  x = f32[3," + std::to_string(W) + "] parameter(0), " + shx +
                                  "\n  v = f32[] " + (constant ? "constant(-2)" : "parameter(1)") +
                                  "\n  ROOT y = f32[3," + std::to_string(out) + "] pad(x, v), padding=0_0x" +
                                  std::to_string(lo) + "_" + std::to_string(hi) + "_" + std::to_string(interior) + ", " +
                                  shx + "\n}\n");
              }
        for (int64_t start : {0, 1, 3})
          for (int64_t limit : {W, W - 1, int64_t{5}})
            for (int64_t stride : {1, 2, 3}) {
              if (limit <= start) continue;
              const int64_t out = (limit - start + stride - 1) / stride;
              modules.push_back("HloModule s\nENTRY e {\n  x = f32[3," + std::to_string(W) + "] parameter(0), " + shx +
                                "\n  ROOT y = f32[3," + std::to_string(out) + "] slice(x), slice={[0:3], [" +
                                std::to_string(start) + ":" + std::to_string(limit) + ":" + std::to_string(stride) +
                                "]}, " + shx + "\n}\n");
            }
        for (const std::string& hlo : modules) {
          std::string why;
          auto r = PartitionAndVerify(hlo, 2 * devices, &why);
          QVERIFY2(r.has_value(), (hlo + why).c_str());
          ++checked;
          bool halo = false;
          for (const auto& c : r->collectives) halo |= StartsWith(c.reason, "halo exchange");
          halo_programs += halo;
        }
      }
    qInfo("%d programs verified, %d with halo exchange", checked, halo_programs);
    QVERIFY(checked > 300);
    QVERIFY(halo_programs > checked / 3);
  }

  // Pad along the sharded dim: each device fetches the rows its output shard needs from its left
  // neighbour (the output's boundaries moved right by the low padding), then pads locally.
  void padAlongShardedDim() {
    const std::string hlo = R"(HloModule p
ENTRY e {
  x = f32[16] parameter(0), sharding={devices=[4]<=[4]}
  v = f32[] parameter(1), sharding={replicated}
  ROOT y = f32[20] pad(x, v), padding=3_1, sharding={devices=[4]<=[4]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    // Output tile i covers [5i, 5i+5) = input [5i-3, 5i+2): tile 1 needs the last 2 rows of its
    // left neighbour, tile 2 the last one; tiles 0 and 3 only their own rows (and the pad value).
    QCOMPARE(r->collectives.size(), size_t{1});
    QVERIFY2(StartsWith(r->collectives[0].reason, "halo exchange: pad dim 0 left halo 2 row"),
             r->collectives[0].reason.c_str());
    QCOMPARE(r->collectives[0].replica_groups, HopPairs(4, 1));
    QCOMPARE(r->collectives[0].bytes_per_device, int64_t{2 * 4});
    // The exchanged, masked window is the output shard: positions outside the input read v.
    QCOMPARE(r->module->entry()->root()->opcode(), Opcode::kSelect);
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[5]"));
    QCOMPARE(r->module->entry()->root()->operand(2)->operand(0)->opcode(), Opcode::kParameter);
  }

  // A slice that shifts data across shards: only the rows each device's output needs travel (one
  // row from the neighbour), not a gather of the dimension.
  void sliceShift() {
    const std::string hlo = R"(HloModule s
ENTRY e {
  x = f32[2,16] parameter(0), sharding={devices=[1,4]<=[4]}
  ROOT y = f32[2,14] slice(x), slice={[0:2], [1:15]}, sharding={devices=[1,4]<=[4]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    // Output tile i covers [4i, 4i+4) = input [4i+1, 4i+5): own rows 1..3 and row 0 of the right
    // neighbour (the last tile holds only 2 valid outputs and needs nothing from beyond).
    QCOMPARE(r->collectives.size(), size_t{1});
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: slice dim 1 right halo 1 row"));
    QCOMPARE(r->collectives[0].replica_groups, HopPairs(4, -1));
    QCOMPARE(r->collectives[0].bytes_per_device, int64_t{2 * 1 * 4});
  }

  // Slicing q out of a fused qkv split over the same 8 devices (XLA's SliceToHalfSize, at a size
  // where the bytes count): output tile i needs input column i, held by tile i/3 — up to two tiles
  // away and one source for three targets, beyond a halo. Each piece is sent in a round of
  // collective-permutes (a source serving k targets takes k rounds): 3 permutes of one [1024,1]
  // column, where the gather received 21 columns. Also with the tiles partially replicated (each
  // copy group exchanges within itself) and uneven (27 columns over 4).
  void sliceByPermuteRounds() {
    const std::string hlo = R"(HloModule s, num_partitions=8
ENTRY e {
  x = f32[1024,24] parameter(0), sharding={devices=[1,8]<=[8]}
  ROOT q = f32[1024,8] slice(x), slice={[0:1024], [0:8]}, sharding={devices=[1,8]<=[8]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 8, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    const auto cps = Find(*r->module, Opcode::kCollectivePermute);
    QCOMPARE(cps.size(), size_t{3});
    using Pairs = std::vector<std::pair<int64_t, int64_t>>;
    QCOMPARE(cps[0]->source_target_pairs, (Pairs{{0, 1}, {1, 3}, {2, 6}}));
    QCOMPARE(cps[1]->source_target_pairs, (Pairs{{0, 2}, {1, 4}, {2, 7}}));
    QCOMPARE(cps[2]->source_target_pairs, (Pairs{{1, 5}}));
    QCOMPARE(cps[0]->shape().ToString(false), std::string("f32[1024,1]"));
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[1024,1]"));
    const std::string replicated = R"(HloModule s, num_partitions=8
ENTRY e {
  x = f32[512,27] parameter(0), sharding={devices=[1,4,2]<=[8] last_tile_dim_replicate}
  ROOT q = f32[512,9] slice(x), slice={[0:512], [9:18]}, sharding={devices=[1,4,2]<=[8] last_tile_dim_replicate}
})";
    r = PartitionAndVerify(replicated, 8, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(Find(*r->module, Opcode::kCollectivePermute).size(), size_t{1});
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[512,3]"));
  }

  // Base dilation (GSPMD Appendix A.2, Figure 10): output tiles whose windows start at the same
  // phase of the dilation share one local window; otherwise (stride 1) every tile takes the
  // largest low padding and a dynamic-slice drops its extra outputs.
  void convBaseDilation() {
    const std::string uniform = R"(HloModule c
ENTRY e {
  x = f32[2,8,3] parameter(0), sharding={devices=[1,2,1]<=[2]}
  k = f32[3,3,4] parameter(1), sharding={replicated}
  ROOT y = f32[2,8,4] convolution(x, k), window={size=3 stride=2 pad=1_1 lhs_dilate=2}, dim_labels=b0f_0io->b0f, sharding={devices=[1,2,1]<=[2]}
})";
    std::string why;
    auto r = PartitionAndVerify(uniform, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs[0]->window.dims[0].base_dilation, int64_t{2});
    QCOMPARE(convs[0]->shape().ToString(false), std::string("f32[2,4,4]"));  // no extra outputs
    const std::string phases = R"(HloModule c
ENTRY e {
  x = f32[2,7,3] parameter(0), sharding={devices=[1,2,1]<=[2]}
  k = f32[3,3,4] parameter(1), sharding={replicated}
  ROOT y = f32[2,14,4] convolution(x, k), window={size=3 pad=1_2 lhs_dilate=2}, dim_labels=b0f_0io->b0f, sharding={devices=[1,2,1]<=[2]}
})";
    r = PartitionAndVerify(phases, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    convs = Find(*r->module, Opcode::kConvolution);
    // Tile 0's windows start one position before its first element, tile 1's on it: both use low
    // padding 1 and compute 8 outputs, of which each keeps its 7.
    QCOMPARE(convs[0]->window.dims[0].padding_low, int64_t{1});
    QCOMPARE(convs[0]->shape().ToString(false), std::string("f32[2,8,4]"));
    QCOMPARE(r->module->entry()->root()->opcode(), Opcode::kDynamicSlice);
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[2,7,4]"));
  }

  // 2-D convolution with both spatial dims sharded on a 2x2 mesh: one halo per side per dim,
  // along the mesh axis that shards that dim.
  void conv2DBothSpatialDims() {
    const std::string hlo = R"(HloModule conv2d
ENTRY e {
  x = f32[1,8,8,2] parameter(0), sharding={devices=[1,2,2,1]<=[4]}
  k = f32[3,3,2,4] parameter(1), sharding={replicated}
  ROOT y = f32[1,8,8,4] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, sharding={devices=[1,2,2,1]<=[4]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(r->collectives.size(), size_t{4});
    // Dim 1 is split over devices {0,1} vs {2,3} (the major mesh axis), dim 2 over {0,2} vs {1,3}.
    QCOMPARE(r->collectives[0].replica_groups, std::string("{{0,2},{1,3}}"));
    QCOMPARE(r->collectives[1].replica_groups, std::string("{{2,0},{3,1}}"));
    QCOMPARE(r->collectives[2].replica_groups, std::string("{{0,1},{2,3}}"));
    QCOMPARE(r->collectives[3].replica_groups, std::string("{{1,0},{3,2}}"));
    QCOMPARE(r->collectives[0].bytes_per_device, int64_t{1 * 1 * 4 * 2 * 4});  // one row of the [1,4,4,2] shard
    QCOMPARE(r->collectives[2].bytes_per_device, int64_t{1 * 6 * 1 * 2 * 4});  // dim 1 already widened to 6
    for (const auto& c : r->collectives) QVERIFY(StartsWith(c.reason, "halo exchange: convolution dim "));
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs.size(), size_t{1});
    QCOMPARE(convs[0]->operand(0)->shape().dims, (std::vector<int64_t>{1, 6, 6, 2}));
    QCOMPARE(convs[0]->shape().dims, (std::vector<int64_t>{1, 4, 4, 4}));
  }

  // Batch-sharded and output-feature-sharded convolutions run locally; input-feature
  // (contracting) sharding sums partial convolutions with one all-reduce (like a dot).
  void convNonSpatialShardings_data() {
    QTest::addColumn<QString>("x");
    QTest::addColumn<QString>("k");
    QTest::addColumn<QString>("y");
    QTest::addColumn<QString>("collective");  // "none" or the opcode of the single collective
    QTest::addColumn<QString>("local_x");
    QTest::addColumn<QString>("local_y");
    QTest::newRow("batch") << "{devices=[2,1,1]<=[2]}" << "{replicated}" << "{devices=[2,1,1]<=[2]}" << "none"
                           << "f32[2,16,8]" << "f32[2,16,6]";
    QTest::newRow("output feature") << "{replicated}" << "{devices=[1,1,2]<=[2]}" << "{devices=[1,1,2]<=[2]}"
                                    << "none" << "f32[4,16,8]" << "f32[4,16,3]";
    QTest::newRow("input feature (contracting)") << "{devices=[1,1,2]<=[2]}" << "{devices=[1,2,1]<=[2]}"
                                                 << "{replicated}" << "all-reduce" << "f32[4,16,4]" << "f32[4,16,6]";
    QTest::newRow("batch and spatial on a 2x2 mesh") << "{devices=[2,2,1]<=[4]}" << "{replicated}"
                                                     << "{devices=[2,2,1]<=[4]}" << "collective-permute"
                                                     << "f32[2,10,8]" << "f32[2,8,6]";
  }
  void convNonSpatialShardings() {
    QFETCH(QString, x);
    QFETCH(QString, k);
    QFETCH(QString, y);
    QFETCH(QString, collective);
    QFETCH(QString, local_x);
    QFETCH(QString, local_y);
    const int64_t devices = x.contains("<=[4]") ? 4 : 2;
    const std::string hlo = "HloModule c\nENTRY e {\n  x = f32[4,16,8] parameter(0), sharding=" + x.toStdString() +
                            "\n  k = f32[3,8,6] parameter(1), sharding=" + k.toStdString() +
                            "\n  ROOT y = f32[4,16,6] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f, "
                            "sharding=" + y.toStdString() + "\n}\n";
    std::string why;
    auto r = PartitionAndVerify(hlo, devices, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    if (collective == "none") {
      QCOMPARE(r->collectives.size(), size_t{0});
    } else {
      QVERIFY(!r->collectives.empty());
      for (const auto& c : r->collectives) QCOMPARE(std::string(OpcodeName(c.kind)), collective.toStdString());
    }
    if (collective == "all-reduce") {
      QCOMPARE(r->collectives.size(), size_t{1});
      QCOMPARE(r->collectives[0].reason, std::string("convolution: contracting dimension sharded"));
      QCOMPARE(r->collectives[0].bytes_per_device, int64_t{4 * 16 * 6 * 4});
    }
    if (collective == "collective-permute") {
      QCOMPARE(r->collectives.size(), size_t{2});  // one row each side, within each batch group
      QCOMPARE(r->collectives[0].replica_groups, std::string("{{0,1},{2,3}}"));
    }
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs.size(), size_t{1});
    QCOMPARE(QString::fromStdString(convs[0]->operand(0)->shape().ToString(false)), local_x);
    QCOMPARE(QString::fromStdString(convs[0]->shape().ToString(false)), local_y);
  }

  // Depthwise convolution (feature_group_count = features): feature sharding runs locally with
  // half the groups per device.
  void depthwiseFeatureGroups() {
    const std::string hlo = R"(HloModule dw
ENTRY e {
  x = f32[2,12,8] parameter(0), sharding={devices=[1,1,2]<=[2]}
  k = f32[3,1,8] parameter(1), sharding={devices=[1,1,2]<=[2]}
  ROOT y = f32[2,12,8] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f, feature_group_count=8, sharding={devices=[1,1,2]<=[2]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{0});
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs.size(), size_t{1});
    QCOMPARE(convs[0]->feature_group_count, int64_t{4});
    QCOMPARE(convs[0]->shape().ToString(false), std::string("f32[2,12,4]"));
  }

  // Filter-gradient convolution: input and kernel sharded on the same spatial dim, output whole:
  // the input fetches the halo its kernel shard's windows need, partial results are all-reduced.
  void kernelShardedSpatialPartialSums() {
    const std::string hlo = R"(HloModule wgrad
ENTRY e {
  x = f32[4,16,2] parameter(0), sharding={devices=[1,2,1]<=[2]}
  g = f32[4,16,3] parameter(1), sharding={devices=[1,2,1]<=[2]}
  ROOT w = f32[3,2,3] convolution(x, g), window={size=16 pad=1_1}, dim_labels=f0b_i0o->0bf, sharding={replicated}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    // Kernel tile j holds rows [8j, 8j+8): with padding 1 its windows read input rows
    // [8j-1, 8j+9): one row from each neighbour.
    QCOMPARE(r->collectives.size(), size_t{3});
    QCOMPARE(r->collectives[0].kind, Opcode::kCollectivePermute);
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: convolution dim 1 left halo 1 row"));
    QCOMPARE(r->collectives[0].replica_groups, std::string("{{0,1}}"));
    QVERIFY(StartsWith(r->collectives[1].reason, "halo exchange: convolution dim 1 right halo 1 row"));
    QCOMPARE(r->collectives[1].replica_groups, std::string("{{1,0}}"));
    QCOMPARE(r->collectives[2].kind, Opcode::kAllReduce);
    QCOMPARE(r->collectives[2].bytes_per_device, int64_t{3 * 2 * 3 * 4});
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs[0]->operand(0)->shape().ToString(false), std::string("f32[4,10,2]"));
    QCOMPARE(convs[0]->operand(1)->shape().ToString(false), std::string("f32[4,8,3]"));
    QCOMPARE(convs[0]->window.dims[0].size, int64_t{8});
  }

  // Reduce-window on the windowed dim: max (identity -inf masks the array's edges) and add.
  void reduceWindow_data() {
    QTest::addColumn<QString>("hlo");
    QTest::addColumn<int>("devices");
    QTest::addColumn<QStringList>("pieces");  // "L<rows>" / "R<rows>" (one hop each)
    QTest::addColumn<QString>("local_in");
    QTest::addColumn<QString>("local_out");
    const char* max_rw = R"(HloModule rw
mx { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
ENTRY e {
  x = f32[4,16] parameter(0), sharding={devices=[1,4]<=[4]}
  i = f32[] constant(-inf)
  ROOT y = f32[4,16] reduce-window(x, i), window={size=1x3 pad=0_0x1_1}, to_apply=mx, sharding={devices=[1,4]<=[4]}
})";
    const char* add_rw = R"(HloModule rw
sum { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[10] parameter(0), sharding={devices=[4]<=[4]}
  i = f32[] constant(0)
  ROOT y = f32[5] reduce-window(x, i), window={size=3 stride=2 pad=1_1}, to_apply=sum, sharding={devices=[4]<=[4]}
})";
    const char* max_s2 = R"(HloModule rw
mx { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
ENTRY e {
  x = f32[3,12] parameter(0), sharding={devices=[1,2]<=[2]}
  i = f32[] constant(-inf)
  ROOT y = f32[3,6] reduce-window(x, i), window={size=1x3 stride=1x2 pad=0_0x1_1}, to_apply=mx, sharding={devices=[1,2]<=[2]}
})";
    QTest::newRow("max, window 3 stride 1, 16 over 4") << max_rw << 4 << QStringList{"L1", "R1"} << "f32[4,6]" << "f32[4,4]";
    QTest::newRow("add, window 3 stride 2, uneven 10 over 4") << add_rw << 4 << QStringList{"R2"} << "f32[5]" << "f32[2]";
    QTest::newRow("max, window 3 stride 2, 12 over 2") << max_s2 << 2 << QStringList{"L1"} << "f32[3,7]" << "f32[3,3]";
  }
  void reduceWindow() {
    QFETCH(QString, hlo);
    QFETCH(int, devices);
    QFETCH(QStringList, pieces);
    QFETCH(QString, local_in);
    QFETCH(QString, local_out);
    std::string why;
    auto r = PartitionAndVerify(hlo.toStdString(), devices, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(r->collectives.size(), static_cast<size_t>(pieces.size()));
    for (int i = 0; i < pieces.size(); ++i) {
      const auto& c = r->collectives[static_cast<size_t>(i)];
      const bool left = pieces[i][0] == 'L';
      QCOMPARE(c.kind, Opcode::kCollectivePermute);
      QVERIFY2(StartsWith(c.reason, "halo exchange: reduce-window dim ") &&
                   c.reason.find(std::string(left ? "left" : "right") + " halo " + pieces[i].mid(1).toStdString() +
                                 " row") != std::string::npos,
               c.reason.c_str());
      QCOMPARE(c.replica_groups, HopPairs(devices, left ? 1 : -1));
    }
    auto rws = Find(*r->module, Opcode::kReduceWindow);
    QCOMPARE(rws.size(), size_t{1});
    QCOMPARE(QString::fromStdString(rws[0]->operand(0)->shape().ToString(false)), local_in);
    QCOMPARE(QString::fromStdString(rws[0]->shape().ToString(false)), local_out);
  }

  // A replicated input and a sharded output: each device cuts its window locally (pad +
  // dynamic-slice), no communication at all.
  void reduceWindowFromReplicatedInput() {
    const std::string hlo = R"(HloModule rw
sum { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[6,2] parameter(0), sharding={replicated}
  i = f32[] constant(0)
  ROOT y = f32[3,2] reduce-window(x, i), window={size=3x1 stride=2x1 pad=1_0x0_0}, to_apply=sum, sharding={devices=[2,1]<=[2]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{0});
    auto rws = Find(*r->module, Opcode::kReduceWindow);
    QCOMPARE(rws[0]->operand(0)->opcode(), Opcode::kDynamicSlice);
    QCOMPARE(rws[0]->operand(0)->shape().ToString(false), std::string("f32[5,2]"));  // rows [4i-1, 4i+4)
    QCOMPARE(rws[0]->shape().ToString(false), std::string("f32[2,2]"));
  }

  // Base dilation with stride > 1 where the tiles' windows start at different phases of the
  // dilation (GSPMD Appendix A.2, Figure 10): no output slice reconciles them, so each device
  // dilates its exchanged rows explicitly (interior padding) and cuts its windows at its own
  // offset; the spatial dim stays split, nothing is gathered.
  void baseDilatedStridedWindowsAtDifferentPhases() {
    const std::string conv = R"(HloModule c
ENTRY e {
  x = f32[2,7,3] parameter(0), sharding={devices=[1,2,1]<=[2]}
  k = f32[3,3,4] parameter(1), sharding={replicated}
  ROOT y = f32[2,10,4] convolution(x, k), window={size=3 stride=2 pad=1_1 lhs_dilate=3}, dim_labels=b0f_0io->b0f, sharding={devices=[1,2,1]<=[2]}
})";
    std::string why;
    auto r = PartitionAndVerify(conv, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(r->collectives.size(), size_t{1});
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: convolution dim 1 left halo 1 row"));
    // Tile 0's first window starts one dilated position before element 0, tile 1's on element 3:
    // phases 1 and 0. The local convolution runs undilated on the explicitly dilated rows.
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs.size(), size_t{1});
    QCOMPARE(convs[0]->window.dims[0].base_dilation, int64_t{1});
    QCOMPARE(convs[0]->window.dims[0].padding_low, int64_t{0});
    QCOMPARE(convs[0]->shape().ToString(false), std::string("f32[2,5,4]"));
    QCOMPARE(convs[0]->operand(0)->opcode(), Opcode::kDynamicSlice);
    QCOMPARE(convs[0]->operand(0)->shape().ToString(false), std::string("f32[2,11,4]").replace(9, 1, "3"));
    bool interior = false;
    for (const Instruction* p : Find(*r->module, Opcode::kPad)) interior |= p->padding[1].interior == 2;
    QVERIFY(interior);

    // A sweep of base dilations 2..3 with strides 2..3 (conv and reduce-window, several devices):
    // every program keeps the dim split (no all-gather) and verifies.
    int checked = 0, explicit_dilation = 0;
    for (int64_t W : {5, 7, 9})
      for (int64_t devices : {2, 3, 4})
        for (int64_t bd : {2, 3})
          for (int64_t stride : {2, 3})
            for (int64_t K : {1, 2, 3})
              for (int64_t lo : {0, 1, 2}) {
                const int64_t dilated_in = (W - 1) * bd + 1 + lo + 1, D = K;
                if (dilated_in < D) continue;
                const int64_t O = (dilated_in - D) / stride + 1;
                const std::string ds = std::to_string(devices);
                const std::string sh = "sharding={devices=[1," + ds + ",1]<=[" + ds + "]}";
                const std::string hlo = "HloModule s\nr { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                                        "  ROOT c = f32[] maximum(a, b) }\nENTRY e {\n  x = f32[2," + std::to_string(W) +
                                        ",3] parameter(0), " + sh + "\n  k = f32[" + std::to_string(K) +
                                        ",3,2] parameter(1), sharding={replicated}\n  c = f32[2," + std::to_string(O) +
                                        ",2] convolution(x, k), window={size=" + std::to_string(K) + " stride=" +
                                        std::to_string(stride) + " pad=" + std::to_string(lo) + "_1 lhs_dilate=" +
                                        std::to_string(bd) + "}, dim_labels=b0f_0io->b0f, " + sh +
                                        "\n  i = f32[] constant(-inf)\n  w = f32[2," + std::to_string(O) +
                                        ",3] reduce-window(x, i), window={size=1x" + std::to_string(K) + "x1 stride=1x" +
                                        std::to_string(stride) + "x1 pad=0_0x" + std::to_string(lo) + "_1x0_0 lhs_dilate=1x" +
                                        std::to_string(bd) + "x1}, to_apply=r, " + sh + "\n  ROOT t = (f32[2," +
                                        std::to_string(O) + ",2], f32[2," + std::to_string(O) + ",3]) tuple(c, w), sharding={" +
                                        sh.substr(9) + ", " + sh.substr(9) + "}\n}\n";
                std::string why2;
                auto q = PartitionAndVerify(hlo, devices, &why2);
                QVERIFY2(q.has_value(), (hlo + why2).c_str());
                for (const auto& c : q->collectives)
                  QVERIFY2(c.kind != Opcode::kAllGather, (hlo + c.reason).c_str());
                for (const Instruction* p : Find(*q->module, Opcode::kPad)) explicit_dilation += p->padding[1].interior > 0;
                ++checked;
              }
    qInfo("%d programs verified, %d explicit dilations", checked, explicit_dilation);
    QVERIFY(checked > 150);
    QVERIFY(explicit_dilation > checked / 2);
  }

  // The kernel gradient of a 2x up-sampling (transposed) convolution, as the 3-D U-Net's backward
  // pass has it: the input (base-dilated by 2) and the output gradient split alike along the
  // spatial dim. Kernel tile j (output-gradient rows [4j, 4j+4)) reads dilated positions
  // [4j-1, 4j+4): input rows [2j, 2j+2), exactly its own shard, so no halo at all; the partial
  // sums are all-reduced. (Before, base dilation made the kernel dim whole: both operands were
  // gathered.)
  void kernelGradientOfUpSampling() {
    const std::string hlo = R"(HloModule wgrad
ENTRY e {
  x = f32[2,8,3] parameter(0), sharding={devices=[1,4,1]<=[4]}
  g = f32[2,16,5] parameter(1), sharding={devices=[1,4,1]<=[4]}
  ROOT w = f32[2,3,5] convolution(x, g), window={size=16 pad=1_1 lhs_dilate=2}, dim_labels=f0b_i0o->0bf, sharding={replicated}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{1});
    QCOMPARE(r->collectives[0].kind, Opcode::kAllReduce);
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs[0]->operand(0)->shape().ToString(false), std::string("f32[2,2,3]"));  // the own shard
    QCOMPARE(convs[0]->window.dims[0].size, int64_t{4});  // the kernel shard: 16 / 4 taps
    QCOMPARE(convs[0]->window.dims[0].base_dilation, int64_t{2});
    QCOMPARE(convs[0]->window.dims[0].padding_low, int64_t{1});
    // Kernel shards of 3 taps: tile j's windows start at dilated position 3j - 1, at different
    // phases of the dilation (1, 0, 1, 0); each device dilates its exchanged rows explicitly
    // (a batch of 32 makes the activations worth more than the kernel gradient's all-reduce).
    const std::string odd = R"(HloModule wgrad
ENTRY e {
  x = f32[32,8,3] parameter(0), sharding={devices=[1,4,1]<=[4]}
  g = f32[32,12,5] parameter(1), sharding={devices=[1,4,1]<=[4]}
  ROOT w = f32[5,3,5] convolution(x, g), window={size=12 pad=1_0 lhs_dilate=2}, dim_labels=f0b_i0o->0bf, sharding={replicated}
})";
    r = PartitionAndVerify(odd, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    int halos = 0;
    for (const auto& c : r->collectives) halos += StartsWith(c.reason, "halo exchange");
    QVERIFY(halos >= 1);
    convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs[0]->window.dims[0].base_dilation, int64_t{1});  // dilated explicitly
    QCOMPARE(convs[0]->window.dims[0].size, int64_t{3});
  }

  // Reverse along a sharded dim keeps it split: even shards swap places (one collective-permute);
  // uneven ones first move the padding to the other end (a halo exchange of P rows), reverse
  // locally, then swap. Sweep: extents 1..13, 1..5 devices, 1-D and 2-D shardings (partially
  // replicated too), one or two reversed dims; nothing is gathered.
  void reverseAlongShardedDims() {
    const std::string even = R"(HloModule r
ENTRY e {
  x = f32[8,3] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT y = f32[8,3] reverse(x), dimensions={0}, sharding={devices=[4,1]<=[4]}
})";
    std::string why;
    auto r = PartitionAndVerify(even, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{1});
    QCOMPARE(r->collectives[0].kind, Opcode::kCollectivePermute);
    QCOMPARE(r->collectives[0].replica_groups, std::string("{{0,3},{1,2},{2,1},{3,0}}"));
    const std::string uneven = R"(HloModule r
ENTRY e {
  x = f32[10,3] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT y = f32[10,3] reverse(x), dimensions={0}, sharding={devices=[4,1]<=[4]}
})";
    r = PartitionAndVerify(uneven, 4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{2});
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: reverse dim 0 left halo 2 row(s)"));
    QCOMPARE(r->collectives[1].kind, Opcode::kCollectivePermute);
    int checked = 0;
    for (int64_t n = 1; n <= 13; ++n)
      for (int64_t devices = 1; devices <= 5; ++devices)
        for (int variant = 0; variant < 3; ++variant) {
          // 0: [n,3] on dim 0; 1: [n,6] 2-D tiled (devices x 2), both dims reversed; 2: partially
          // replicated (devices x 2 copies).
          const std::string ds = std::to_string(devices), d2 = std::to_string(2 * devices);
          std::string shape, sh, dims;
          if (variant == 0) {
            shape = "f32[" + std::to_string(n) + ",3]";
            sh = "{devices=[" + ds + ",1]<=[" + ds + "]}";
            dims = "0";
          } else if (variant == 1) {
            shape = "f32[" + std::to_string(n) + ",6]";
            sh = "{devices=[" + ds + ",2]<=[" + d2 + "]}";
            dims = "0,1";
          } else {
            shape = "f32[" + std::to_string(n) + ",3]";
            sh = "{devices=[" + ds + ",1,2]<=[" + d2 + "] last_tile_dim_replicate}";
            dims = "0";
          }
          const int64_t total = variant == 0 ? devices : 2 * devices;
          const std::string hlo = "HloModule r\nENTRY e {\n  x = " + shape + " parameter(0), sharding=" + sh +
                                  "\n  ROOT y = " + shape + " reverse(x), dimensions={" + dims + "}, sharding=" + sh + "\n}\n";
          auto q = PartitionAndVerify(hlo, total, &why);
          QVERIFY2(q.has_value(), (hlo + why).c_str());
          for (const auto& c : q->collectives) QVERIFY2(c.kind == Opcode::kCollectivePermute, (hlo + c.reason).c_str());
          ++checked;
        }
    QCOMPARE(checked, 13 * 5 * 3);
  }

  // Reshapes that split or merge a sharded dim whose shards do not line up on the two sides
  // ([15] -> [3,5] on 2 devices: 8 elements vs 2 rows of 5): the group is flattened locally and
  // a halo exchange brings each device the elements of its result shard. Sweep: [a*b, c] <->
  // [a, b, c] for a 2..7, b 1..4, 2..4 devices, both directions; nothing is gathered.
  void unevenReshapeAlongShardedDim() {
    const std::string split = R"(HloModule s
ENTRY e {
  x = f32[15,2] parameter(0), sharding={devices=[2,1]<=[2]}
  ROOT y = f32[3,5,2] reshape(x), sharding={devices=[2,1,1]<=[2]}
})";
    std::string why;
    auto r = PartitionAndVerify(split, 2, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{1});
    // Device 0 holds elements [0,8) and needs rows 0..1 = [0,10): two from device 1.
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: reshape dim 0 right halo 2 row(s)"));
    QVERIFY(r->replicated_fallbacks.empty());
    int checked = 0, halos = 0;
    for (int64_t a = 2; a <= 7; ++a)
      for (int64_t b = 1; b <= 4; ++b)
        for (int64_t devices = 2; devices <= 4; ++devices)
          for (bool to_split : {true, false}) {
            const std::string ds = std::to_string(devices);
            const std::string flat = "f32[" + std::to_string(a * b) + ",2]", grid = "f32[" + std::to_string(a) + "," +
                                                                               std::to_string(b) + ",2]";
            const std::string sf = "{devices=[" + ds + ",1]<=[" + ds + "]}", sg = "{devices=[" + ds + ",1,1]<=[" + ds + "]}";
            const std::string hlo = "HloModule s\nENTRY e {\n  x = " + (to_split ? flat : grid) + " parameter(0), sharding=" +
                                    (to_split ? sf : sg) + "\n  ROOT y = " + (to_split ? grid : flat) +
                                    " reshape(x), sharding=" + (to_split ? sg : sf) + "\n}\n";
            auto q = PartitionAndVerify(hlo, devices, &why);
            QVERIFY2(q.has_value(), (hlo + why).c_str());
            QVERIFY2(q->replicated_fallbacks.empty(), hlo.c_str());
            for (const auto& c : q->collectives) {
              QVERIFY2(c.kind == Opcode::kCollectivePermute, (hlo + c.reason).c_str());
              halos += StartsWith(c.reason, "halo exchange: reshape");
            }
            ++checked;
          }
    qInfo("%d reshapes verified, %d halo pieces", checked, halos);
    QVERIFY(halos > 40);
  }
};

QTEST_APPLESS_MAIN(SpmdHaloTest)
#include "test_spmd_halo.moc"

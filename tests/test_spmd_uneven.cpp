// Uneven all-to-all reshards (GSPMD §4.1/§4.5: a dimension whose extent does not divide by the
// number of tiles travels padded to a multiple of it; the padding of the dimension that becomes
// whole is sliced off, the padding of the newly sharded one is the target's uneven-shard padding,
// masked by the consumers it could leak into) on 2, 3 and 4 devices, and the kernel-side halo of
// filter-gradient convolutions (SpmdOptions::conv_halo_exchange_always_on_lhs = false). Every
// program is verified numerically against the unpartitioned module.
#include <QtTest>

#include <optional>
#include <string>
#include <vector>

#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "tests/spmd_test_support.h"
#include "partitioner/spmd/spmd_partitioner.h"

using namespace shardscope;

namespace {

using testing::Find;

std::optional<PartitionResult> PartitionAndVerify(const std::string& hlo, int64_t devices, std::string* why,
                                                  bool halo_on_lhs = true) {
  testing::PartitionVerifyOptions o;
  o.spmd.conv_halo_exchange_always_on_lhs = halo_on_lhs;
  o.seeds = {11};
  return testing::PartitionAndVerify(hlo, devices, why, o);
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string Copy(const std::string& shape, const std::string& from, const std::string& to) {
  return "HloModule m\nENTRY e {\n  p = " + shape + " parameter(0), sharding=" + from + "\n  ROOT c = " + shape +
         " copy(p), sharding=" + to + "\n}\n";
}

}  // namespace

class TestSpmdUneven : public QObject {
  Q_OBJECT
 private slots:
  // One all-to-all moves the sharding between two dims, whichever of them is uneven.
  void unevenAllToAll_data() {
    QTest::addColumn<QString>("shape");
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<int>("devices");
    QTest::addColumn<QString>("groups");
    QTest::addColumn<QString>("a2a_operand");  // the padded, split shard the all-to-all exchanges
    QTest::addColumn<QString>("result");       // the per-device result shape
    // XLA's TiledToTiledUneven (dims 31 and 7 over 2): pad 7 -> 8, split 2 x 4; 31 = 2 x 16 - 1.
    QTest::newRow("2 devices, both uneven") << "f32[7,31,8]" << "{devices=[1,2,1]<=[2]}"
                                            << "{devices=[2,1,1]<=[2]}" << 2 << "{{0,1}}" << "f32[2,4,16,8]"
                                            << "f32[4,31,8]";
    // 10 over 3 (shards of 4, last holds 2) moves to 7 over 3 (shards of 3, 7 -> 9).
    QTest::newRow("3 devices, both uneven") << "f32[10,7]" << "{devices=[3,1]<=[3]}" << "{devices=[1,3]<=[3]}" << 3
                                            << "{{0,1,2}}" << "f32[4,3,3]" << "f32[10,3]";
    // Only the target dim uneven: 12 over 3 moves to 5 over 3 (5 -> 6).
    QTest::newRow("3 devices, target uneven") << "f32[12,5]" << "{devices=[3,1]<=[3]}" << "{devices=[1,3]<=[3]}" << 3
                                              << "{{0,1,2}}" << "f32[4,3,2]" << "f32[12,2]";
    // Only the source dim uneven: 9 over 4 (shards of 3, the last all padding... 3+3+3+0) to 8.
    QTest::newRow("4 devices, source uneven") << "f32[5,8,9]" << "{devices=[1,1,4]<=[4]}" << "{devices=[1,4,1]<=[4]}"
                                              << 4 << "{{0,1,2,3}}" << "f32[5,4,2,3]" << "f32[5,2,9]";
    // A 2x2 mesh: dim 2 (3 over 2) moves to dim 1 (7 over 2) within each row of the mesh; dim 0 keeps
    // its tiling (5 over 2, uneven too).
    QTest::newRow("2x2 mesh, subgroups") << "f32[5,7,3]" << "{devices=[2,1,2]<=[4]}" << "{devices=[2,2,1]<=[4]}" << 4
                                         << "{{0,1},{2,3}}" << "f32[3,2,4,2]" << "f32[3,4,3]";
  }
  void unevenAllToAll() {
    QFETCH(QString, shape);
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(int, devices);
    QFETCH(QString, groups);
    QFETCH(QString, a2a_operand);
    QFETCH(QString, result);
    std::string why;
    auto r = PartitionAndVerify(Copy(shape.toStdString(), from.toStdString(), to.toStdString()), devices, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{1});
    QCOMPARE(r->collectives[0].kind, Opcode::kAllToAll);
    QCOMPARE(QString::fromStdString(r->collectives[0].replica_groups), groups);
    auto a2a = Find(*r->module, Opcode::kAllToAll);
    QCOMPARE(a2a.size(), size_t{1});
    QCOMPARE(QString::fromStdString(a2a[0]->shape().ToString(false)), a2a_operand);
    // Bytes per device: the padded shard.
    auto padded = ParseShape(a2a_operand.toStdString());
    QVERIFY(padded.ok());
    QCOMPARE(r->collectives[0].bytes_per_device, padded->ByteSize());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(QString::fromStdString(r->module->entry()->root()->shape().ToString(false)), result);
  }

  // The padding an uneven all-to-all leaves in the newly sharded dim must not leak into a
  // reduction over that dim (the reduce masks it with the reducer's identity): a sum and a product
  // (whose identity 1 differs from the all-to-all's zero padding).
  void paddingMaskedDownstream_data() {
    QTest::addColumn<QString>("reducer");
    QTest::addColumn<QString>("init");  // the reducer's identity
    QTest::newRow("add") << "add" << "0";
    QTest::newRow("multiply") << "multiply" << "1";
    QTest::newRow("maximum") << "maximum" << "-inf";
  }
  void paddingMaskedDownstream() {
    QFETCH(QString, reducer);
    QFETCH(QString, init);
    const std::string hlo = R"(HloModule m
r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] )" + reducer.toStdString() + R"((a, b)
}
ENTRY e {
  p = f32[6,7] parameter(0), sharding={devices=[3,1]<=[3]}
  t = f32[6,7] copy(p), sharding={devices=[1,3]<=[3]}
  n = f32[6,7] negate(t), sharding={devices=[1,3]<=[3]}
  i = f32[] constant()" + init.toStdString() + R"()
  ROOT s = f32[6] reduce(n, i), dimensions={1}, to_apply=r, sharding={devices=[3]<=[3]}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 3, &why);
    QVERIFY2(r.has_value(), why.c_str());
    auto a2a = Find(*r->module, Opcode::kAllToAll);
    QCOMPARE(a2a.size(), size_t{1});
    QCOMPARE(a2a[0]->shape().ToString(false), std::string("f32[2,3,3]"));  // 7 -> 9 = 3 x 3
    QCOMPARE(Find(*r->module, Opcode::kAllGather).size(), size_t{0});
  }

  // All-to-all then a local slice (a finer target): 7 over 2 on dim 1 (two replicas) -> 8 over 4
  // on dim 0 (the all-to-all leaves 8 over 2; each device keeps its half).
  void unevenAllToAllThenSlice() {
    std::string why;
    auto r = PartitionAndVerify(Copy("f32[8,7]", "{devices=[1,2,2]<=[4] last_tile_dim_replicate}",
                                     "{devices=[4,1]<=[4]}"),
                                4, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[2,7]"));
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(Find(*r->module, Opcode::kAllToAll).size(), size_t{1});
  }

  // Sweep: every pair of dims, extents 1..7, 2..4 devices: one all-to-all, numerically exact.
  void sweepVerifiesNumerically() {
    int cases = 0;
    for (int64_t n = 2; n <= 4; ++n)
      for (int64_t A = 1; A <= 7; ++A)
        for (int64_t B = 1; B <= 7; ++B) {
          const std::string shape = "f32[" + std::to_string(A) + "," + std::to_string(B) + ",2]";
          const std::string ns = std::to_string(n);
          std::string why;
          auto r = PartitionAndVerify(Copy(shape, "{devices=[" + ns + ",1,1]<=[" + ns + "]}",
                                           "{devices=[1," + ns + ",1]<=[" + ns + "]}"),
                                      n, &why);
          QVERIFY2(r.has_value(), (shape + " over " + ns + ": " + why).c_str());
          QVERIFY2(Find(*r->module, Opcode::kAllToAll).size() == 1, (shape + " over " + ns).c_str());
          ++cases;
        }
    QCOMPARE(cases, 147);
  }

  // ---- the kernel-side halo (conv_halo_exchange_always_on_lhs = false) ----

  // XLA's ConvolutionLhsTiledRhsTiledWithPadding, small: input rows 14 per device, kernel
  // (the output gradient) 14 per device; with padding 1 and 3 outputs, device i's rows meet the
  // taps [14i-1, 14i+15): one kernel row from each neighbour, the input stays put.
  void kernelHaloWithPadding() {
    const std::string hlo = R"(HloModule wgrad
ENTRY e {
  x = f32[2,28,3,4] parameter(0), sharding={devices=[1,2,1,1]<=[2]}
  g = f32[2,28,3,5] parameter(1), sharding={devices=[1,2,1,1]<=[2]}
  ROOT w = f32[3,3,4,5] convolution(x, g), window={size=28x3 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 2, &why, /*halo_on_lhs=*/false);
    QVERIFY2(r.has_value(), why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QCOMPARE(r->collectives.size(), size_t{3});
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: convolution kernel dim 1 left halo 1 row"));
    QCOMPARE(r->collectives[0].bytes_per_device, int64_t{2 * 1 * 3 * 5 * 4});
    QVERIFY(StartsWith(r->collectives[1].reason, "halo exchange: convolution kernel dim 1 right halo 1 row"));
    QCOMPARE(r->collectives[2].kind, Opcode::kAllReduce);
    QCOMPARE(r->collectives[2].bytes_per_device, int64_t{3 * 3 * 4 * 5 * 4});
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs.size(), size_t{1});
    QCOMPARE(convs[0]->operand(0)->shape().ToString(false), std::string("f32[2,14,3,4]"));
    QCOMPARE(convs[0]->operand(1)->shape().ToString(false), std::string("f32[2,16,3,5]"));
    QCOMPARE(convs[0]->window.dims[0].padding_low, int64_t{2});
    QCOMPARE(convs[0]->window.dims[0].padding_high, int64_t{2});
    // The default (halo on the input) exchanges input rows instead.
    auto l = PartitionAndVerify(hlo, 2, &why);
    QVERIFY2(l.has_value(), why.c_str());
    QVERIFY(StartsWith(l->collectives[0].reason, "halo exchange: convolution dim 1"));
  }

  // XLA's ConvolutionLhsTiledRhsTiledWindowDilateUneven, small: 14 input rows over 2 (7 each, odd
  // against the dilation 2), kernel 7 over 2 (4 + 3): device 1's rows start at an odd phase, so it
  // places them one row further into its local buffer (pad + dynamic-slice); the kernel needs one
  // row from the left only.
  void kernelHaloDilatedUneven() {
    const std::string hlo = R"(HloModule wgrad
ENTRY e {
  x = f32[2,14,3,4] parameter(0), sharding={devices=[1,2,1,1]<=[2]}
  g = f32[2,7,3,5] parameter(1), sharding={devices=[1,2,1,1]<=[2]}
  ROOT w = f32[3,3,4,5] convolution(x, g), window={size=7x3 pad=1_0x1_1 rhs_dilate=2x1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 2, &why, false);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{2});
    QVERIFY(StartsWith(r->collectives[0].reason, "halo exchange: convolution kernel dim 1 left halo 1 row(s) from 1"));
    QCOMPARE(r->collectives[0].replica_groups, std::string("{{0,1}}"));
    QCOMPARE(r->collectives[1].kind, Opcode::kAllReduce);
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs[0]->operand(0)->shape().ToString(false), std::string("f32[2,8,3,4]"));
    QCOMPARE(convs[0]->operand(1)->shape().ToString(false), std::string("f32[2,4,3,5]"));
    QCOMPARE(convs[0]->operand(0)->opcode(), Opcode::kDynamicSlice);
  }

  // Negative padding and dilation (XLA's ...WindowDilateNegativeRhsPadding): the taps of device
  // i's rows are exactly its own kernel shard: no halo at all, only the all-reduce.
  void kernelHaloNotNeeded() {
    const std::string hlo = R"(HloModule wgrad
ENTRY e {
  x = f32[2,16,4,3] parameter(0), sharding={devices=[1,2,1,1]<=[2]}
  g = f32[2,8,3,5] parameter(1), sharding={devices=[1,2,1,1]<=[2]}
  ROOT w = f32[1,2,3,5] convolution(x, g), window={size=8x3 pad=0_-1x0_0 rhs_dilate=2x1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
})";
    std::string why;
    auto r = PartitionAndVerify(hlo, 2, &why, false);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(r->collectives.size(), size_t{1});
    QCOMPARE(r->collectives[0].kind, Opcode::kAllReduce);
    auto convs = Find(*r->module, Opcode::kConvolution);
    QCOMPARE(convs[0]->operand(0)->shape().ToString(false), std::string("f32[2,8,4,3]"));
    QCOMPARE(convs[0]->operand(1)->shape().ToString(false), std::string("f32[2,4,3,5]"));
  }

  // Sweep of 1-D filter gradients with the kernel-side halo: input and kernel sharded alike over
  // 2..4 devices, extents, padding, stride and dilation varied; every program numerically exact.
  void sweepKernelHaloVerifiesNumerically() {
    int cases = 0, rhs_halos = 0;
    for (int64_t n : {2, 3, 4})
      for (int64_t W : {9, 12, 13})
        for (int64_t O : {1, 2, 3})
          for (int64_t stride : {1, 2})
            for (int64_t dil : {1, 2, 3})
              for (int64_t lo : {0, 1, 2}) {
                // Kernel extent so that the output has O elements: (W + lo + hi - D) / stride + 1 = O.
                const int64_t hi = 1;
                const int64_t span = W + lo + hi - (O - 1) * stride;  // D = (K - 1) * dil + 1 <= span
                const int64_t K = (span - 1) / dil + 1;
                if (K < 1) continue;
                const int64_t D = (K - 1) * dil + 1;
                if ((W + lo + hi - D) / stride + 1 != O) continue;
                const std::string ns = std::to_string(n);
                const std::string hlo =
                    "HloModule wgrad\nENTRY e {\n  x = f32[2," + std::to_string(W) + ",3] parameter(0), sharding={devices=[1," +
                    ns + ",1]<=[" + ns + "]}\n  g = f32[2," + std::to_string(K) + ",4] parameter(1), sharding={devices=[1," +
                    ns + ",1]<=[" + ns + "]}\n  ROOT w = f32[" + std::to_string(O) + ",3,4] convolution(x, g), window={size=" +
                    std::to_string(K) + " stride=" + std::to_string(stride) + " pad=" + std::to_string(lo) + "_" +
                    std::to_string(hi) + " rhs_dilate=" + std::to_string(dil) +
                    "}, dim_labels=f0b_i0o->0bf, sharding={replicated}\n}\n";
                std::string why;
                auto r = PartitionAndVerify(hlo, n, &why, false);
                QVERIFY2(r.has_value(), (hlo + why).c_str());
                for (const auto& c : r->collectives)
                  if (StartsWith(c.reason, "halo exchange: convolution kernel")) {
                    ++rhs_halos;
                    break;
                  }
                ++cases;
              }
    QVERIFY2(cases >= 100, std::to_string(cases).c_str());
    QVERIFY2(rhs_halos >= cases / 2, (std::to_string(rhs_halos) + " of " + std::to_string(cases)).c_str());
  }
};

QTEST_APPLESS_MAIN(TestSpmdUneven)
#include "test_spmd_uneven.moc"

#include "core/base/units.h"

#include <cmath>
#include <cstdio>

namespace shardscope {

std::string ThreeDigits(double v) {
  char buf[64];
  const double a = std::fabs(v);
  const int decimals = a >= 99.95 ? 0 : (a >= 9.995 ? 1 : 2);
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

namespace {

std::string WithUnit(double v, const char* const* units, int count, double step) {
  int u = 0;
  double a = std::fabs(v);
  while (u + 1 < count && a >= step * 0.9995) {
    a /= step;
    v /= step;
    ++u;
  }
  return ThreeDigits(v) + " " + units[u];
}

}  // namespace

namespace {
const char* const kByteUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
}  // namespace

std::string FormatBytes(double bytes) {
  if (std::fabs(bytes) < 999.5) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
    return buf;
  }
  return WithUnit(bytes, kByteUnits, 6, 1000.0);
}

std::string FormatRate(double bytes_per_s) {
  static const char* const kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s", "PB/s"};
  return WithUnit(bytes_per_s, kUnits, 6, 1000.0);
}

std::string FormatFlopRate(double flops_per_s) {
  static const char* const kUnits[] = {"FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s", "EFLOP/s"};
  return WithUnit(flops_per_s, kUnits, 7, 1000.0);
}

std::string FormatSeconds(double s) {
  if (s == 0) return "0 s";
  const double a = std::fabs(s);
  if (a < 1e-6 * 0.9995) return ThreeDigits(s * 1e9) + " ns";
  if (a < 1e-3 * 0.9995) return ThreeDigits(s * 1e6) + " \u00B5s";
  if (a < 0.9995) return ThreeDigits(s * 1e3) + " ms";
  return ThreeDigits(s) + " s";
}

std::string FormatPercent(double fraction) {
  char buf[32];
  // Below 0.1% (a toy model's utilisation, a latency-bound collective's share) one decimal would
  // read as zero: two significant digits instead.
  if (fraction > 0 && fraction < 0.001) std::snprintf(buf, sizeof buf, "%.2g%%", 100.0 * fraction);
  else std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * fraction);
  return buf;
}

AxisUnit BytesAxisUnit(double max_bytes) {
  AxisUnit u{1, kByteUnits[0]};
  for (int i = 1; i < 6 && std::fabs(max_bytes) / u.divisor >= 1000.0; ++i) u = {u.divisor * 1000.0, kByteUnits[i]};
  return u;
}

AxisUnit SecondsAxisUnit(double max_seconds) {
  const double a = std::fabs(max_seconds);
  if (a >= 1) return {1, "s"};
  if (a >= 1e-3) return {1e-3, "ms"};
  if (a >= 1e-6) return {1e-6, "\u00B5s"};
  return {1e-9, "ns"};
}

}  // namespace shardscope

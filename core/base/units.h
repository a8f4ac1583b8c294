// Units and number formats, one convention for the CLI, the reports and the GUI:
//   bytes   SI units as the sources use them ("8.39 MB", "34.4 GB"; 1 kB = 1000 B), three
//           significant digits; whole bytes below 1 kB ("512 B")
//   rates   "45.0 GB/s"
//   times   "559 µs", "1.23 ms", "2.80 s", "850 ns" (three significant digits; "0 s")
//   FLOPs   "1.23e+14 FLOP/s" is not used: "123 TFLOP/s"
#pragma once

#include <string>

namespace shardscope {

std::string FormatBytes(double bytes);
std::string FormatRate(double bytes_per_s);
std::string FormatSeconds(double seconds);
std::string FormatFlopRate(double flops_per_s);
// Three significant digits without a unit: 186, 45.0, 8.39.
std::string ThreeDigits(double v);
// A fraction as a percentage, one decimal (0.473 -> "47.3%"), two digits under 0.1% ("0.012%").
std::string FormatPercent(double fraction);

// The unit a chart axis reaching `max` uses, in the same convention: values are divided by
// `divisor` and labelled `unit` ("MB" for 8.39e6 bytes; "µs" for 5.59e-4 s).
struct AxisUnit {
  double divisor = 1;
  std::string unit;
};
AxisUnit BytesAxisUnit(double max_bytes);
AxisUnit SecondsAxisUnit(double max_seconds);

}  // namespace shardscope

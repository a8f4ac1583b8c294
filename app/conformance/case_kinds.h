// The kinds of conformance cases and what they share (conformance.h). Internal to app/conformance.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "app/conformance/conformance.h"

namespace shardscope::conformance {

// The files of one case: DIR/NAME.<extension>; `file` is the one that was found.
struct CaseFiles {
  std::string dir, name, file;
  std::string Path(std::string_view extension) const { return dir + "/" + name + std::string(extension); }
  // False when the file cannot be read.
  bool Read(std::string_view extension, std::string* text) const;
};

struct CaseKind {
  std::string name;                          // "propagation"
  std::vector<std::string> case_extensions;  // a case is every file NAME<extension>
  RateUnit unit = RateUnit::kChecks;
  std::string rate_phrase;                   // "checks hold"
  bool partitions = false;
  // Runs one case: fills `result` (not checks/passed: the framework counts them from the checks)
  // and appends the case's checks, each carrying the case's name.
  std::function<void(const CaseFiles& files, const ConformanceOptions& options, CaseResult* result,
                     std::vector<CheckResult>* checks)>
      run;
};

CaseKind PropagationCases();  // propagation_conformance.cpp
CaseKind SpmdCases();         // spmd_conformance.cpp
CaseKind DumpCases();         // dump_conformance.cpp

// Text helpers the kinds share.
std::vector<std::string> NonEmptyLines(const std::string& text);  // trailing spaces and CR removed
std::vector<std::string> SplitTabs(const std::string& line);
std::string Trim(std::string s);  // spaces and CR at both ends

}  // namespace shardscope::conformance

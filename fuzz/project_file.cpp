// Target: the project file (core/project/project_file.h). Any bytes are read or rejected with an
// error; a project that reads writes back to a file that reads as the same project.
#include <string>
#include <string_view>

#include "core/ir/hlo_text.h"
#include "core/project/project_file.h"
#include "fuzz/fuzz_target.h"

using namespace shardscope;
using shardscope::fuzz::Finding;
using shardscope::fuzz::Reach;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reach("inputs");
  auto project = ReadProjectFile(std::string_view(reinterpret_cast<const char*>(data), size), "in.shardscope");
  if (!project.ok()) {
    if (project.error().message.rfind("in.shardscope", 0) != 0) Finding("an error that does not name the file", project.error().message);
    Reach("rejected");
    return 0;
  }
  Reach("read");
  const std::string written = WriteProjectFile(*project);
  auto again = ReadProjectFile(written, "written.shardscope");
  if (!again.ok()) Finding("the written project does not read: " + again.error().message, written);
  std::string why;
  if (!ModulesEqual(*project->module, *again->module, &why)) Finding("the module differs after writing: " + why, written);
  if (!(again->mesh == project->mesh)) Finding("the mesh differs after writing", written);
  if (again->annotations.size() != project->annotations.size()) Finding("the annotations differ after writing", written);
  for (size_t i = 0; i < project->annotations.size(); ++i) {
    if (again->annotations[i].instruction != project->annotations[i].instruction ||
        !(again->annotations[i].sharding == project->annotations[i].sharding)) {
      Finding("annotation " + std::to_string(i) + " differs after writing", written);
    }
  }
  if (again->source_kind != project->source_kind || again->source != project->source || again->selected != project->selected) {
    Finding("source or selection differs after writing", written);
  }
  if (WriteProjectFile(*again) != written) Finding("writing is not a fixed point", written);
  Reach("written and read back equal");
  return 0;
}

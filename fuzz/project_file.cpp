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

void fuzz::TestOneInput(std::string_view text) {
  auto project = ReadProjectFile(text, "in.shardscope");
  if (!project.ok()) {
    if (project.error().message.rfind("in.shardscope", 0) != 0) Finding("an error that does not name the file", project.error().message);
    Reach("rejected");
    return;
  }
  Reach("read");
  const ProjectContents& first = project->contents;
  const std::string written = WriteProjectFile(project->module.get(), first);
  auto again = ReadProjectFile(written, "written.shardscope");
  if (!again.ok()) Finding("the written project does not read: " + again.error().message, written);
  std::string why;
  if (!ModulesEqual(*project->module, *again->module, &why)) Finding("the module differs after writing: " + why, written);
  const ProjectContents& second = again->contents;
  if (!(second.mesh == first.mesh)) Finding("the mesh differs after writing", written);
  if (second.annotations.size() != first.annotations.size()) Finding("the annotations differ after writing", written);
  for (size_t i = 0; i < first.annotations.size(); ++i) {
    if (second.annotations[i].instruction != first.annotations[i].instruction ||
        !(second.annotations[i].sharding == first.annotations[i].sharding)) {
      Finding("annotation " + std::to_string(i) + " differs after writing", written);
    }
  }
  if (second.source_kind != first.source_kind || second.source != first.source || second.selected != first.selected) {
    Finding("source or selection differs after writing", written);
  }
  if (WriteProjectFile(again->module.get(), second) != written) Finding("writing is not a fixed point", written);
  Reach("written and read back equal");
}

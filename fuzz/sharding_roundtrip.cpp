// Target: sharding and mesh text. A sharding that parses prints to text that parses back into an
// equal sharding (with and without metadata), and printing is a fixed point; the same for device
// meshes ("X=4,Y=4", "{x:2, y:8}"). Errors carry an offset inside the text.
#include <string>
#include <string_view>

#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "fuzz/fuzz_target.h"

using namespace shardscope;
using shardscope::fuzz::Finding;
using shardscope::fuzz::Reach;

void fuzz::TestOneInput(std::string_view text) {
  auto sharding = HloSharding::Parse(text);
  if (sharding.ok()) {
    Reach("sharding parsed");
    for (bool metadata : {false, true}) {
      const std::string printed = sharding->ToString(metadata);
      auto again = HloSharding::Parse(printed);
      if (!again.ok()) Finding("the printed sharding does not parse: " + again.error().message, printed);
      if (!(*again == *sharding)) Finding("the sharding round trip differs", std::string(text) + "\n" + printed);
      if (again->ToString(metadata) != printed) Finding("sharding printing is not a fixed point", printed);
    }
    Reach("sharding round trip equal");
  } else {
    fuzz::CheckErrorOffset(sharding.error(), text.size(), "sharding");
  }
  auto mesh = DeviceMesh::Parse(text);
  if (mesh.ok()) {
    Reach("mesh parsed");
    const std::string printed = mesh->ToString();
    auto again = DeviceMesh::Parse(printed);
    if (!again.ok()) Finding("the printed mesh does not parse: " + again.error().message, printed);
    if (!(*again == *mesh)) Finding("the mesh round trip differs", std::string(text) + "\n" + printed);
  } else {
    fuzz::CheckErrorOffset(mesh.error(), text.size(), "mesh");
  }
}

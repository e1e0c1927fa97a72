// STUB: replaced by the owner of this command.
#include <cstdio>

#include "client/cli/commands.h"

namespace kvtier::cli {

int RunEval(int, char**) {
  std::fputs("kvtier: not implemented yet\n", stderr);
  return 2;
}

}  // namespace kvtier::cli

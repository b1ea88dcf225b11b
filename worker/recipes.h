// Named training recipes (--recipe NAME): a recipe is a list of flags that
// stands in for `--recipe NAME` where it is written, as a flags file does,
// so that flags after it win (`--recipe strom2015 --epochs 2`). The recipes
// and the measurements that chose them are in docs/training.md "Recipes".
//
// Threads: pure functions, any thread. Errors: an unknown or missing
// recipe name is kInvalidArgument naming the value (ExpandRecipes).
#ifndef RECKON_WORKER_RECIPES_H_
#define RECKON_WORKER_RECIPES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::worker {

struct Recipe {
  std::string name;
  std::string summary;             // one line, for --help and the log
  std::vector<std::string> flags;  // "--name=value" each
};

// Every recipe, in the order --help lists them.
const std::vector<Recipe>& Recipes();

// `args` with every `--recipe NAME` (or `--recipe=NAME`) replaced, in
// place, by the recipe's flags. kInvalidArgument naming the value for an
// unknown recipe or a missing one. `used` (may be null) gets each recipe
// expanded, in order, for the log.
absl::StatusOr<std::vector<std::string>> ExpandRecipes(const std::vector<std::string>& args,
                                                       std::vector<const Recipe*>* used);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_RECIPES_H_

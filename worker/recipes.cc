#include "worker/recipes.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reckon::worker {
namespace {

bool IsRecipeFlag(const std::string& arg) {
  return arg == "--recipe" || absl::StartsWith(arg, "--recipe=");
}

}  // namespace

const std::vector<Recipe>& Recipes() {
  static const std::vector<Recipe>* const recipes = new std::vector<Recipe>{
      {"default", "reckon's defaults: ReLU 784,512,512,10, momentum lr 0.02, halve after 6", {}},
      {"strom2015",
       "Strom 2015 section 3.3 and Table 1: five sigmoid hidden layers of 1,800 (14.4M "
       "parameters), layer-wise pre-training, the first-epoch ramp, AdaGrad, the rate halved "
       "every epoch after the sixth",
       {"--layers=784,1800,1800,1800,1800,1800,10", "--activation=sigmoid", "--optimizer=adagrad",
        "--lr=0.01", "--lr-schedule=halve", "--halve-after=6", "--pretrain-samples=6000",
        "--warmup-batch=25", "--warmup-fraction=0.1667", "--epochs=10", "--batch=100",
        "--threshold=0.01"}},
  };
  return *recipes;
}

absl::StatusOr<std::vector<std::string>> ExpandRecipes(const std::vector<std::string>& args,
                                                       std::vector<const Recipe*>* used) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!IsRecipeFlag(args[i])) {
      out.push_back(args[i]);
      continue;
    }
    const size_t eq = args[i].find('=');
    if (eq == std::string::npos && i + 1 >= args.size()) {
      return absl::InvalidArgumentError("--recipe needs a value");
    }
    const std::string name = eq == std::string::npos ? args[++i] : args[i].substr(eq + 1);
    const Recipe* found = nullptr;
    std::vector<std::string> names;
    for (const Recipe& recipe : Recipes()) {
      names.push_back(recipe.name);
      if (recipe.name == name) found = &recipe;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--recipe '", name.substr(0, 64), "' is not one of ", absl::StrJoin(names, ", ")));
    }
    out.insert(out.end(), found->flags.begin(), found->flags.end());
    if (used != nullptr) used->push_back(found);
  }
  return out;
}

}  // namespace reckon::worker

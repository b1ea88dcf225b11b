// base/flags.h: the one flag parser of reckon-worker and every reckonctl
// subcommand. Every way a flag is written, every mistake named, and each
// parse starting from the command's defaults.
#include "base/flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, test_name, "default", "a name");
ABSL_FLAG(int64_t, test_count, 3, "a count");
ABSL_FLAG(double, test_rate, 0.5, "a rate");
ABSL_FLAG(bool, test_verbose, false, "a switch");

namespace reckon::base {
namespace {

FlagScope Scope() {
  return {"reckonctl test",
          {{"test_name", "", true}, {"test_count", "7"}, {"test_rate"}, {"test_verbose"}}};
}

TEST(Flags, ValuesTakeEveryFormAndDashesOrUnderscores) {
  ASSERT_TRUE(ParseFlags(Scope(), {"--test-name", "w0", "--test_count=12", "--test-rate",
                                   "1e-3", "--test-verbose"})
                  .ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "w0");
  EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 12);
  EXPECT_DOUBLE_EQ(absl::GetFlag(FLAGS_test_rate), 1e-3);
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_verbose));
  ASSERT_TRUE(ParseFlags(Scope(), {"--test-name=a=b", "--notest-verbose"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "a=b");  // only the first '=' splits
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_verbose));
  ASSERT_TRUE(ParseFlags(Scope(), {"--test-name=x", "--test-verbose=true"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_verbose));
}

TEST(Flags, EachParseStartsFromTheCommandsDefaults) {
  ASSERT_TRUE(ParseFlags(Scope(), {"--test-name", "x", "--test-count", "9", "--test-verbose"}).ok());
  ASSERT_TRUE(ParseFlags(Scope(), {"--test-name", "y"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 7);  // the scope's default, not the flag's 3
  EXPECT_DOUBLE_EQ(absl::GetFlag(FLAGS_test_rate), 0.5);
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_verbose));
}

TEST(Flags, EveryMistakeIsNamed) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--test-name", "x", "--test-cuont", "2"}, "unknown flag --test-cuont"},
      {{"--test-name"}, "--test-name needs a value"},
      {{"--test-name", "x", "--test-count", "two"}, "--test-count 'two'"},
      {{"--test-name", "x", "--test-verbose=maybe"}, "--test-verbose 'maybe'"},
      {{"--test-count", "2"}, "--test-name is required"},
      {{"--test-name", "x", "stray"}, "unexpected argument 'stray'"},
      {{"--no-such-flag"}, "unknown flag --no-such-flag"},
  };
  for (const auto& [args, message] : cases) {
    const absl::Status s = ParseFlags(Scope(), args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
    EXPECT_EQ(s.message().rfind("reckonctl test: ", 0), 0u) << s.message();
  }
}

// As Abseil and torchrun users expect: a misspelt flag names the one it
// probably is, --flagfile is --flags-file, --version says what was built.
TEST(Flags, AnUnknownFlagNamesTheNearestOne) {
  absl::Status s = ParseFlags(Scope(), {"--test-name", "x", "--test-cuont", "2"});
  EXPECT_NE(s.message().find("unknown flag --test-cuont (did you mean --test-count?)"),
            std::string::npos)
      << s.message();
  s = ParseFlags(Scope(), {"--test_verbos"});
  EXPECT_NE(s.message().find("(did you mean --test-verbose?)"), std::string::npos) << s.message();
  s = ParseFlags(Scope(), {"--epochs", "3"});  // nothing near: no guess
  EXPECT_EQ(s.message().find("did you mean"), std::string::npos) << s.message();
}

TEST(Flags, FlagfileIsTheFlagsFileAndVersionSaysWhatWasBuilt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("reckon_flagfile_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "f.flags").string();
  std::ofstream(file) << "--test-name from-file\n";
  std::ostringstream out, err;
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flagfile", file}, out, err), -1) << err.str();
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "from-file");
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flagfile=" + file, "--test-name=y"}, out, err), -1);
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "y");
  std::filesystem::remove_all(dir);

  std::ostringstream version;
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--test-name", "x", "--version"}, version, err), 0);
  const std::string line = version.str();
  EXPECT_EQ(line.rfind("reckonctl ", 0), 0u) << line;  // the program, not the subcommand
  for (const char* part : {"commit ", "build ", "CUDA "}) {
    EXPECT_NE(line.find(part), std::string::npos) << line;
  }
  EXPECT_EQ(line.back(), '\n');
}

TEST(Flags, PassThroughKeepsOtherArgumentsInOrder) {
  std::vector<std::string> rest;
  ASSERT_TRUE(ParseFlags(Scope(), {"--epochs", "3", "--test-name", "x", "--lr=0.1", "plain"},
                         &rest)
                  .ok());
  EXPECT_EQ(rest, (std::vector<std::string>{"--epochs", "3", "--lr=0.1", "plain"}));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "x");
}

TEST(Flags, HelpPrintsEveryFlagItsDefaultAndWhatIsRequired) {
  std::ostringstream out, err;
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--help"}, out, err), 0);
  for (const char* line : {"--test-name (required)", "--test-count (default 7)",
                           "--test-rate (default 0.5)", "--test-verbose (default false)"}) {
    EXPECT_NE(out.str().find(line), std::string::npos) << out.str();
  }
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--bad"}, out, err), 2);
  EXPECT_NE(err.str().find("unknown flag --bad"), std::string::npos) << err.str();
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--test-name", "x"}, out, err), -1);
}

// --help as Abseil's users know it: the flags under headings, in the order
// the command gives them, flags in no group last under "Other"; a hidden
// group (test-only fault injection) only under --helpfull, its flags
// parsing as any other. (reckon-worker listed 83 flags alphabetically,
// --fault-* among them.)
TEST(Flags, HelpGroupsTheFlagsAndHidesTheTestOnesUntilHelpfull) {
  FlagScope scope = Scope();
  ASSERT_TRUE(scope.Group("Training", {"test_rate", "test-count"}).ok());
  ASSERT_TRUE(scope.Group("Testing", {"test_verbose"}, /*hidden=*/true).ok());
  EXPECT_FALSE(scope.Group("X", {"no_such"}).ok());
  EXPECT_FALSE(scope.Group("Y", {"test_count"}).ok()) << "in a group already";
  std::ostringstream help, full, err;
  EXPECT_EQ(ParseFlagsOrExit(scope, {"--help"}, help, err), 0);
  const std::string h = help.str();
  EXPECT_NE(h.find("Training:\n  --test-rate (default 0.5)  a rate\n  --test-count"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("Other:\n  --test-name (required)"), std::string::npos) << h;
  EXPECT_LT(h.find("Training:"), h.find("Other:")) << h;
  EXPECT_EQ(h.find("--test-verbose"), std::string::npos) << h;
  EXPECT_NE(h.find("--helpfull lists the Testing flags too"), std::string::npos) << h;
  EXPECT_EQ(ParseFlagsOrExit(scope, {"--helpfull"}, full, err), 0);
  EXPECT_NE(full.str().find("Testing:\n  --test-verbose (default false)"), std::string::npos)
      << full.str();
  EXPECT_EQ(full.str().find("--helpfull lists"), std::string::npos) << full.str();
  EXPECT_EQ(ParseFlagsOrExit(scope, {"--test-name", "x", "--test-verbose"}, help, err), -1);
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_verbose));
}

// --flags-file (a Kubernetes ConfigMap, a Compose config): the file's flags
// take the place of the argument, so flags after it win.
TEST(Flags, AFlagsFileStandsInForItsFlags) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("reckon_flags_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "training.flags").string();
  std::ofstream(file) << "# training flags\n\n--test-name two words\n  --test_count=12\n"
                         "--test-verbose\n--test-rate 0.25\n";
  std::ostringstream out, err;
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--test-count=5", "--flags-file", file, "--test-rate=2"},
                             out, err),
            -1)
      << err.str();
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "two words");  // the rest of the line
  EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 12);          // the file's, after 5
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_verbose));
  EXPECT_DOUBLE_EQ(absl::GetFlag(FLAGS_test_rate), 2);     // given after the file
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flags-file=" + file}, out, err), -1) << err.str();
  EXPECT_NE(FlagUsage(Scope()).find("--flags-file PATH"), std::string::npos);

  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flags-file", (dir / "none").string()}, out, err), 2);
  EXPECT_NE(err.str().find("--flags-file " + (dir / "none").string()), std::string::npos)
      << err.str();
  std::ofstream(file) << "--test-name=x\ntest-count 3\n";
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flags-file", file}, out, err), 2);
  EXPECT_NE(err.str().find(file + ":2: 'test-count 3' is not a flag"), std::string::npos)
      << err.str();
  std::ofstream(file) << "--flags-file=" << file << "\n";
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flags-file", file}, out, err), 2);
  EXPECT_NE(err.str().find("names another flags file"), std::string::npos) << err.str();
  EXPECT_EQ(ParseFlagsOrExit(Scope(), {"--flags-file"}, out, err), 2);
  EXPECT_NE(err.str().find("--flags-file needs a value"), std::string::npos) << err.str();
  std::filesystem::remove_all(dir);
}

TEST(Flags, AScopeCanBeEveryFlagOfAFile) {
  const FlagScope scope = FlagScope::FromFile("test", "tests/flags_test.cc");
  std::vector<std::string> names;
  for (const FlagSpec& f : scope.flags) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"test_count", "test_name", "test_rate",
                                             "test_verbose"}));
}

}  // namespace
}  // namespace reckon::base

// reckonctl's flag parsing (ctl/flags.h): every way a flag is written, and
// every mistake named.
#include "ctl/flags.h"

#include <gtest/gtest.h>

namespace reckon::ctl {
namespace {

struct Parsed {
  std::string name = "default";
  int64_t count = 3;
  double rate = 0.5;
  bool verbose = false;
};

FlagSet Flags(Parsed* p) {
  FlagSet flags("reckonctl test");
  flags.String("name", &p->name, "a name");
  flags.Int("count", &p->count, "a count");
  flags.Double("rate", &p->rate, "a rate");
  flags.Bool("verbose", &p->verbose, "a switch");
  flags.Require("name");
  return flags;
}

TEST(CtlFlags, ValuesTakeBothFormsAndSwitchesStandAlone) {
  Parsed p;
  FlagSet flags = Flags(&p);
  ASSERT_TRUE(flags.Parse({"--name", "w0", "--count=12", "--rate", "1e-3", "--verbose"}).ok());
  EXPECT_EQ(p.name, "w0");
  EXPECT_EQ(p.count, 12);
  EXPECT_DOUBLE_EQ(p.rate, 1e-3);
  EXPECT_TRUE(p.verbose);
  ASSERT_TRUE(flags.Parse({"--name=a=b", "--verbose=false"}).ok());
  EXPECT_EQ(p.name, "a=b");  // only the first '=' splits
  EXPECT_FALSE(p.verbose);
}

TEST(CtlFlags, UnsetFlagsKeepTheirDefaults) {
  Parsed p;
  FlagSet flags = Flags(&p);
  ASSERT_TRUE(flags.Parse({"--name", "x"}).ok());
  EXPECT_EQ(p.count, 3);
  EXPECT_DOUBLE_EQ(p.rate, 0.5);
  EXPECT_FALSE(p.verbose);
}

TEST(CtlFlags, EveryMistakeIsNamed) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--name", "x", "--cuont", "2"}, "unknown flag --cuont"},
      {{"--name"}, "--name needs a value"},
      {{"--name", "x", "--count", "two"}, "--count: 'two' is not an integer"},
      {{"--name", "x", "--rate", "inf"}, "--rate: 'inf' is not a finite number"},
      {{"--name", "x", "--verbose=maybe"}, "--verbose: 'maybe' is not true or false"},
      {{"--count", "2"}, "--name is required"},
      {{"--name", "x", "stray"}, "unexpected argument 'stray'"},
  };
  for (const auto& [args, message] : cases) {
    Parsed p;
    FlagSet flags = Flags(&p);
    const absl::Status s = flags.Parse(args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
    EXPECT_EQ(s.message().rfind("reckonctl test: ", 0), 0u) << s.message();
  }
}

TEST(CtlFlags, UsageListsEveryFlagAndWhatIsRequired) {
  Parsed p;
  const std::string usage = Flags(&p).Usage();
  for (const char* flag : {"--name (required)", "--count", "--rate", "--verbose"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << usage;
  }
}

}  // namespace
}  // namespace reckon::ctl

// Reading the summaries reckon-worker writes (--summary-json, SummaryJson in
// worker/trainer.cc): one flat JSON object of numbers, strings without
// escapes, and one-level {...} objects. A format this project owns, so a
// field lookup is enough; not a general JSON parser.
#ifndef RECKON_CTL_SUMMARY_JSON_H_
#define RECKON_CTL_SUMMARY_JSON_H_

#include <string>

namespace reckon::ctl {

// The whole file; empty when it cannot be read.
std::string ReadTextFile(const std::string& path);
// The raw value after "key": a number's text, a string's contents (without
// quotes) or an object's text with its braces; empty when absent.
std::string SummaryField(const std::string& json, const std::string& key);
// The number after "key": (0 when absent).
double SummaryNumber(const std::string& json, const std::string& key);

// The reckon-worker binary built or installed beside the running reckonctl
// (or test); empty when there is none.
std::string FindWorkerBinary();

}  // namespace reckon::ctl

#endif  // RECKON_CTL_SUMMARY_JSON_H_

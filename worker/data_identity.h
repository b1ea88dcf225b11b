// What the cluster fingerprint says of a worker's training data (issue 35):
// two workers given different data must not train one model together, and
// are refused at the handshake naming it. Made of what is cheap to read
// whatever the dataset's size: its format, sample counts and width, and a
// SHA-256 over each file's name, size and first and last 64 KiB (the
// header, the first rows and the last ones, the labels of a small file
// whole).
//
// Threads: a function over files, any thread. Errors: a folder that cannot
// be read is its read error, naming the file.
#ifndef RECKON_WORKER_DATA_IDENTITY_H_
#define RECKON_WORKER_DATA_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"

namespace reckon::worker {

// E.g. "npy train 3000 test 600 x5 3f2a9c0e1b7d4a55" or "idx train 60000
// test 10000 5c1d...". Errors as the readers' (InspectNpyDataset,
// CountIdxSamples): naming the file.
absl::StatusOr<std::string> DataIdentity(const std::string& dir);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_DATA_IDENTITY_H_

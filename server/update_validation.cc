#include "server/update_validation.h"

#include "absl/strings/str_cat.h"

namespace reckon::server {

ValidatedUpdate ValidateUpdate(const v1::Update& update, uint64_t param_count,
                               const codec::WeightChecksum& checksum) {
  auto decoded = std::make_shared<codec::DecodedUpdate>();
  ValidatedUpdate out;
  out.status = codec::DecodeUpdate(update, decoded.get());
  if (out.status.ok() && decoded->param_count != param_count) {
    out.status = absl::DataLossError(absl::StrCat("param_count ", decoded->param_count,
                                                  " but this cluster's model has ", param_count));
  }
  if (out.status.ok()) {
    const uint64_t contribution = codec::ChecksumContribution(checksum, *decoded);
    if (contribution != update.checksum_delta()) {
      out.status = absl::DataLossError(
          absl::StrCat("its checksum_delta ", codec::ChecksumHex(update.checksum_delta()),
                       " is not its words' ", codec::ChecksumHex(contribution)));
    }
  }
  if (out.status.ok()) out.decoded = std::move(decoded);
  return out;
}

}  // namespace reckon::server

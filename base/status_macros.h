// Status plumbing shared by every reckon library. This Abseil (20220623) has
// no RETURN_IF_ERROR / ASSIGN_OR_RETURN, so these are ours.
//
// Threads: macros, any thread. Errors: they return the error they were given.
#ifndef RECKON_BASE_STATUS_MACROS_H_
#define RECKON_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RECKON_CONCAT_INNER_(a, b) a##b
#define RECKON_CONCAT_(a, b) RECKON_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) once; returns it from the enclosing
// function when it is not OK.
#define RECKON_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status reckon_status_ = (expr);          \
    if (!reckon_status_.ok()) return reckon_status_; \
  } while (false)

// `lhs` is declared or assigned from the value of `expr` (an absl::StatusOr);
// the error is returned from the enclosing function instead.
#define RECKON_ASSIGN_OR_RETURN(lhs, expr) \
  RECKON_ASSIGN_OR_RETURN_IMPL_(RECKON_CONCAT_(reckon_statusor_, __LINE__), lhs, expr)
#define RECKON_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#endif  // RECKON_BASE_STATUS_MACROS_H_

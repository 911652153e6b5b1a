// Catch, included after LibTorch's logging header: c10/util/Logging.h defines a CHECK of its own,
// and whichever comes last wins, so tests include Catch through here and never get c10's.
#pragma once

#include <c10/util/Logging.h>

#include <catch2/catch.hpp>

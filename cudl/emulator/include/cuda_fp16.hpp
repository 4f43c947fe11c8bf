// shim for the cudl emulator: everything lives in cudl_prelude.h
#pragma once
#include "cudl_prelude.h"

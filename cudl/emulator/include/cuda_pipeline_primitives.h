// <cuda_pipeline_primitives.h> for the cudl emulator: the __pipeline_* functions live in cudl_ptx.h.
#pragma once
#include "cudl_prelude.h"

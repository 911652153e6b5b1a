# NNX_WITH_CUDA: on when the LibTorch found was built with CUDA and NCCL is found. NCCL is taken
# from the same Python environment as torch (the library torch itself loads), else the CUDA toolkit.

set(NNX_WITH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  execute_process(
    COMMAND ${NNX_PYTHON} -c "import nvidia.nccl as n; print(list(n.__path__)[0])"
    OUTPUT_VARIABLE nnx_wheel_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(NNX_NCCL_INCLUDE_DIR nccl.h
    HINTS ${nnx_wheel_nccl}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NNX_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
    HINTS ${nnx_wheel_nccl}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(NNX_NCCL_INCLUDE_DIR AND NNX_NCCL_LIBRARY)
    set(NNX_WITH_CUDA ON)
    message(STATUS "nnx: NCCL ${NNX_NCCL_LIBRARY}")
  else()
    message(STATUS "nnx: LibTorch has CUDA but NCCL was not found; CUDA parts off")
  endif()
endif()
message(STATUS "nnx: CUDA/NCCL parts ${NNX_WITH_CUDA}")

# Finds LibTorch 2.x in the project's Python environment (tools/install-deps.sh makes it), or in
# the interpreter named by NNX_PYTHON, through torch.utils.cmake_prefix_path; no flags needed.

# The environment install-deps creates, where tools/python/venv-path.sh says it lives.
function(nnx_default_python out)
  execute_process(COMMAND ${CMAKE_SOURCE_DIR}/tools/python/venv-path.sh
                  OUTPUT_VARIABLE venv OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE status)
  if(status EQUAL 0 AND EXISTS ${venv}/.nnx-complete)
    set(${out} ${venv}/bin/python PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# An NNX_PYTHON given on the command line stays. One nnx chose is chosen again at every
# configure, so a build configured before install-deps, or before the requirements changed (a
# new environment), takes the environment that is there now.
if(NOT NNX_PYTHON OR NNX_PYTHON STREQUAL "${NNX_PYTHON_CHOSEN}")
  nnx_default_python(python)
  if(NOT python)
    find_package(Python3 COMPONENTS Interpreter)
    set(python ${Python3_EXECUTABLE})
  endif()
  set(NNX_PYTHON ${python} CACHE FILEPATH "Python interpreter whose torch provides LibTorch"
      FORCE)
  set(NNX_PYTHON_CHOSEN ${python} CACHE INTERNAL "the interpreter nnx chose as NNX_PYTHON")
endif()
# A change of requirements names another environment: configure again when it changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_SOURCE_DIR}/tools/python/requirements.txt)
execute_process(
  COMMAND ${NNX_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE nnx_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE status ERROR_QUIET)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "nnx: '${NNX_PYTHON}' cannot import torch. Run tools/install-deps.sh "
                      "(it creates the project's Python environment), or pass "
                      "-DNNX_PYTHON=/path/to/python whose torch is 2.x.")
endif()
# Another environment than the last configure's: forget what CMake found in the old one (Torch_DIR,
# the libraries' paths), or the build would go on linking it.
if(NNX_TORCH_PREFIX AND NOT NNX_TORCH_PREFIX STREQUAL nnx_torch_prefix)
  message(STATUS "nnx: LibTorch moved from ${NNX_TORCH_PREFIX} to ${nnx_torch_prefix}")
  string(REPLACE "/torch/share/cmake" "" old_packages "${NNX_TORCH_PREFIX}")
  get_cmake_property(cached CACHE_VARIABLES)
  foreach(var IN LISTS cached)
    string(FIND "${${var}}" "${old_packages}" at)
    if(at EQUAL 0)
      unset(${var} CACHE)
    endif()
  endforeach()
endif()
set(NNX_TORCH_PREFIX ${nnx_torch_prefix} CACHE INTERNAL "where the last configure found LibTorch")
list(PREPEND CMAKE_PREFIX_PATH ${nnx_torch_prefix})

# A CUDA LibTorch looks for the CUDA toolkit; point it at the system one when present.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
# Name the GPU architectures so that LibTorch's CMake does not probe for a GPU (none in CI);
# 9.0 is Hopper. Override with -DTORCH_CUDA_ARCH_LIST or the environment variable.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "nnx: LibTorch ${Torch_VERSION} at ${nnx_torch_prefix} is too old; "
                      "nnx supports LibTorch 2.x (tools/install-deps.sh installs it).")
endif()
message(STATUS "nnx: LibTorch ${Torch_VERSION} from ${nnx_torch_prefix}")

# ATen's parallel_for is inline OpenMP: the sources that call it are built with OpenMP and link
# the runtime LibTorch loads (the wheel ships its own libgomp), so that one runtime serves both.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_library(NNX_OPENMP_RUNTIME NAMES libgomp.so.1 gomp PATHS ${TORCH_INSTALL_PREFIX}/lib
             NO_DEFAULT_PATH)
if(NOT NNX_OPENMP_RUNTIME)
  set(NNX_OPENMP_RUNTIME ${OpenMP_CXX_LIBRARIES})
endif()

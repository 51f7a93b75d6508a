# `cpack` (in a build tree) makes flowrun_VERSION_ARCH.deb of what
# packaging/CMakeLists.txt installs. Configure that tree with
# -DCMAKE_INSTALL_PREFIX=/usr, as scripts/test's package phase does: the
# manual page names the documentation's directory and the zsh completion goes
# where Debian's zsh looks, both from the prefix. Depends is computed by
# dpkg-shlibdeps (dpkg-dev) from the libraries the binary links.
set(FLOWRUN_PACKAGE_MAINTAINER "flowrun maintainers <maintainers@users.noreply.a-seed-2805f3a6.example>"
    CACHE STRING "The .deb's Maintainer field")
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "flowrun: the .deb installs to /usr; configure with -DCMAKE_INSTALL_PREFIX=/usr before cpack "
                 "(now ${CMAKE_INSTALL_PREFIX})")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME flowrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${FLOWRUN_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "launcher for distributed PyTorch training flows (torchrun replacement)")
set(CPACK_PACKAGE_DESCRIPTION
    "flowrun runs a flow of steps from one YAML file: a step with parallel: runs one worker per GPU of the host, or across nodes through Slurm, ssh or agents started by hand; a step with join: runs once after it, with the files the workers wrote. Workers get torchrun's environment, so PyTorch DDP, Lightning and fastai scripts run unchanged; `flowrun run` takes torchrun's command line.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/deb)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${FLOWRUN_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libcrypto is loaded at its first use (lib/protocol/openssl_api.cpp), so dpkg-shlibdeps cannot see it.
if(NOT FLOWRUN_STATIC_DEPS)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libssl3 | libssl3t64")
endif()
# The steps are usually Python scripts; PyTorch, Slurm and ssh only for what uses them.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch, slurm-client, openssh-client")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

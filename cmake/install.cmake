# Installs the library as a CMake package: find_package(flashcore) then link flashcore::flashcore.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS flashcore EXPORT flashcoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/flashcore DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashcoreTargets NAMESPACE flashcore::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashcore)

set(FLASHCORE_CONFIG_NEEDS_CUDA ${FLASHCORE_HAS_CUDA})
configure_package_config_file(cmake/flashcoreConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashcoreConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashcore)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashcoreConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashcoreConfig.cmake
              ${PROJECT_BINARY_DIR}/flashcoreConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashcore)

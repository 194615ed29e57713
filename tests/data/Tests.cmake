# Data-layer tests (issue #3). Unit tests (GlobalOrder, DataSplits, DataLoad) register
# themselves from tests/unit; these are the multi-rank and Python-driven ones.
foreach(np 1 2 4)
  mb_add_mpi_test(data_read ${np} "DataRead*")
endforeach()
mb_add_python_test(data_files data/test_data_files.py)
mb_add_python_test(data_errors data/test_data_errors.py)
mb_add_python_test(data_tools data/test_data_tools.py)
# Graph datasets (issue 18): the JSON-lines converter, malformed graph files, the h5py example.
mb_add_python_test(data_graphs_convert data/test_graphs.py ARGS ConverterTest DocExampleTest)
foreach(case offsets edges nodes_and_labels)
  mb_add_python_test(data_graphs_files_${case} data/test_graphs.py ARGS MalformedFilesTest.test_${case})
endforeach()
mb_add_python_test(data_panel data/test_panel.py)  # issue 17: the panel layout
# Note [Data continuity]: a load's identity equals identifyFile's and a serial reference's.
foreach(np 1 2 3)
  mb_add_mpi_test(data_identity ${np} "DataIdentity*")
endforeach()

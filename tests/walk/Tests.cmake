# megabatch walk (the walk-forward): fold cuts against pandas and numpy, each fold's rows against
# predict's, folds alone against the whole walk, a stop and a kill against the uninterrupted
# walk, extension and refused changes.
foreach(case PlanTest WalkTest FoldTest ReportTest StopTest)
  string(REGEX REPLACE "Test$" "" short ${case})
  mb_add_python_test(walk.${short} walk/test_walk.py ARGS ${case} TIMEOUT 600)
endforeach()
set_tests_properties(py.walk.Stop PROPERTIES PROCESSORS 2)

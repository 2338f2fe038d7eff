"""lrdoctor's tests: one folder per package of lrdoctor, top-level modules' tests here."""

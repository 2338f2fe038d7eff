from lrdoctor.cli import main

main()

def main()
    print("Hello from FireFlash")
    print(sum(range(1, 11)))


main()
